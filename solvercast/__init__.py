"""solvercast: schedule distributed PyTorch FX graphs with constraint solvers.

Pipeline (DESIGN.md): GraphModule --extract--> Problem --solve--> Schedule --lower--> GraphModule,
with `simulate` / `validate` / `lower_bounds` judging every schedule.
"""

from solvercast.ir.bounds import Bounds, lower_bounds
from solvercast.cost.device import DeviceProfile, get_profile
from solvercast.errors import (
    ExtractionError,
    InfeasibleBudgetError,
    InvalidProblemError,
    InvalidScheduleError,
    SolvercastError,
)
from solvercast.fx.extract import extract_problem
from solvercast.ir.problem import Buffer, Machine, Problem, Role, Task
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import SimResult, simulate, validate

__all__ = [
    "Bounds", "Buffer", "DeviceProfile", "ExtractionError", "InfeasibleBudgetError", "InvalidProblemError",
    "InvalidScheduleError", "Machine", "Problem", "Role", "Schedule", "SimResult", "SolvercastError", "Task",
    "extract_problem", "get_profile", "lower_bounds", "simulate", "validate",
]

from solvercast.pipeline.api import OptimizeResult, SolvercastPass, optimize  # noqa: E402  (needs the names above)
from solvercast.fx.lower import lower  # noqa: E402  (also registers the anchor ops, which lowered graphs call)
from solvercast.pipeline.report import Report  # noqa: E402

__all__ += ["OptimizeResult", "Report", "SolvercastPass", "lower", "optimize"]

# `solvercast.cost.calibrate(gm)` is the function; its module stays importable as `solvercast.cost.calibrate` in
# `from solvercast.cost.calibrate import ...` (Python finds submodules in sys.modules first).
from solvercast.cost.calibrate import calibrate  # noqa: E402

__all__ += ["calibrate"]
