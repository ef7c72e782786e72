"""solvercast: schedule distributed PyTorch FX graphs with constraint solvers.

Pipeline (DESIGN.md): GraphModule --extract--> Problem --solve--> Schedule --lower--> GraphModule,
with `simulate` / `validate` / `lower_bounds` judging every schedule. The public names are gathered
here from the subpackages, which import downward only: ir, graph, cost, fx, solvers and heuristics,
rewrites, runtime, pipeline (README, "Layout").
"""

from solvercast.cost.calibrate import calibrate
from solvercast.cost.device import DeviceProfile, get_profile
from solvercast.errors import (
    ExtractionError,
    InfeasibleBudgetError,
    InvalidProblemError,
    InvalidScheduleError,
    SolvercastError,
)
from solvercast.fx.extract import extract_problem
from solvercast.fx.lower import lower  # also registers the anchor ops, which lowered graphs call
from solvercast.ir.bounds import Bounds, lower_bounds
from solvercast.ir.problem import Buffer, Machine, Problem, Role, Task
from solvercast.ir.schedule import Schedule
from solvercast.ir.simulate import SimResult, simulate, validate
from solvercast.pipeline.api import OptimizeResult, SolvercastPass, optimize
from solvercast.pipeline.report import Report
from solvercast.rewrites.bucketing import BucketOptions
from solvercast.rewrites.decompose import DecomposeOptions

__all__ = [
    "BucketOptions", "Bounds", "Buffer", "DecomposeOptions", "DeviceProfile", "ExtractionError", "InfeasibleBudgetError", "InvalidProblemError",
    "InvalidScheduleError", "Machine", "OptimizeResult", "Problem", "Report", "Role", "Schedule", "SimResult",
    "SolvercastError", "SolvercastPass", "Task", "calibrate", "extract_problem", "get_profile", "lower",
    "lower_bounds", "optimize", "simulate", "validate",
]
