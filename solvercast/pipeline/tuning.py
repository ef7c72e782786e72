"""Every tuning value of a solve in one record: `Tuning`, passed to `optimize(..., tuning=)`.

Each part lives beside the code it steers (`CpsatTuning` in solvers/cpsat.py, `WindowTuning` in
solvers/large.py, `PrefixTuning` in solvers/prefixes.py, `TimePlanTuning` in pipeline/time_plan.py); the
portfolio's own shares (`PortfolioTuning`, read by pipeline/portfolio.py) are here. Every record is
frozen: a study varies a value with `dataclasses.replace`, for example

    tuning = dataclasses.replace(DEFAULT_TUNING,
                                 portfolio=dataclasses.replace(DEFAULT_TUNING.portfolio, fill_idle_share=0.5))
    optimize(gm, tuning=tuning)
"""

from __future__ import annotations

from dataclasses import dataclass

from solvercast.pipeline.time_plan import TIME_PLAN_TUNING, TimePlanTuning
from solvercast.solvers.cpsat import CPSAT_TUNING, CpsatTuning
from solvercast.solvers.large import WINDOW_TUNING, WindowTuning
from solvercast.solvers.prefixes import PREFIX_TUNING, PrefixTuning


@dataclass(frozen=True)
class PortfolioTuning:
    """How `portfolio.solve_cpsat` shares its time among its phases (results: experiments/results/)."""

    #: share of the time the whole model gets before windows polish its answer: enough to prove fsdp_layers 4
    #: layers' optimum, the rest to windows (cpsat_budgets.md, "the model's share"; tuning_notes.md#whole-model)
    whole_model_share: float = 0.8
    #: ... and at most this many deterministic units: the whole model's proofs and last gains come early, while
    #: windows keep improving (cpsat_budgets.md, "the whole model stops"; tuning_notes.md#whole-model)
    whole_model_units: float = 3.0
    #: ... on graphs of up to this many tasks; on larger ones units x this / tasks: there windows and moves gain
    #: more per second than the whole model (tuning_notes.md#whole-model-full-tasks)
    whole_model_full_tasks: int = 300
    #: tasks per window of the polish (fsdp_tp: 25 tasks 333.6 us, 40: 332.4, 80: 343.1; cpsat_budgets.md)
    polish_window: int = 40
    #: planned seconds per window of the polish (40 / 0.5 s beat 80 / 1.0 and 120 / 2.0; cpsat_budgets.md)
    polish_seconds_per_window: float = 0.5
    #: once every window of a size has been tried without a gain, windows and their seconds grow by this factor
    #: and start over: a long limit goes to larger neighbourhoods (cpsat_budgets.md, "windows that grow")
    polish_growth: float = 1.5
    #: graphs of up to this many timed tasks get the exact prefix search; 2 FSDP layers (~160) have too many
    #: prefixes to finish in minutes (prefix_search.md)
    prefix_max_tasks: int = 120
    #: share of the limit the prefix search gets first, before the model: where it ends the answer is proven,
    #: where it does not it stops at a tenth of its lengths and gives the time back (prefix_search.md)
    prefix_share: float = 0.25
    #: the prefix search runs again below the best makespan with the counted seconds the windows leave, when
    #: there are at least this many and more than the first search had
    prefix_min_seconds: float = 0.5
    #: on graphs small enough for the prefix search, share of what the model leaves that exact windows get
    #: before CP-SAT's windows (prefix_search.md)
    exact_windows_share: float = 0.3
    #: moves of later compute tasks into the default stream's stalls after the windows, counted in simulations,
    #: on top of the windows' time and capped by the deadline (fill_idle.md; tuning_notes.md#fill-idle)
    fill_idle_share: float = 0.3
    #: on larger graphs, exact windows around the stalls after CP-SAT's, with this share of the limit on top of
    #: the windows' time: simple_fsdp 2 layers reaches its optimum (cpsat_quality.md; tuning_notes.md#late-exact)
    late_exact_share: float = 0.1
    #: the cut walk runs last (where it cannot run beside the search) only with this many wall seconds left:
    #: taking its time from the windows made worse schedules (cut_bounds.md)
    cut_min_seconds: float = 0.2
    #: whether the cut walk may run beside the search, on a second core (off: always last, in the caller's time)
    cut_walk_beside: bool = True


#: the shipped values
PORTFOLIO_TUNING = PortfolioTuning()


@dataclass(frozen=True)
class Tuning:
    """Every tuning record of one solve: each model, the windows, the prefix search, the portfolio's shares
    and the time plan."""

    cpsat: CpsatTuning = CPSAT_TUNING
    windows: WindowTuning = WINDOW_TUNING
    prefixes: PrefixTuning = PREFIX_TUNING
    portfolio: PortfolioTuning = PORTFOLIO_TUNING
    time_plan: TimePlanTuning = TIME_PLAN_TUNING


#: the shipped values
DEFAULT_TUNING = Tuning()
