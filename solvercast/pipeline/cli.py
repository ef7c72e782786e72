"""`solvercast optimize ...` and `solvercast models`.

Bad input ends with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from solvercast.cost.calibrate import calibrate
from solvercast.cost.device import get_profile
from solvercast.cost.model import AnalyticCostModel
from solvercast.cost.profiled import profile_cost_model
from solvercast.errors import SolvercastError
from solvercast.models import build, describe
from solvercast.pipeline import methods
from solvercast.pipeline.api import optimize
from solvercast.rewrites.bucketing import BucketOptions


def _parse_value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _parse_params(items: list[str]) -> dict:
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--param takes key=value, got {item!r}")
        params[key] = _parse_value(value)
    return params


def _parse_budget(text: str | None):
    if text is None:
        return None  # optimize's default: 1.0 x the original peak
    if text.lower() == "none":
        return float("inf")  # no budget
    value = _parse_value(text)
    if not isinstance(value, (int, float)):
        raise ValueError(f"--memory-budget takes bytes (int), a ratio of the original peak (float) or none, got {text!r}")
    return value


def _parse_budgets(text: str) -> list:
    """``--budgets 1.0,1.02,1.05,none``: each as ``--memory-budget`` reads one."""
    budgets = [_parse_budget(item.strip()) for item in text.split(",") if item.strip()]
    if not budgets:
        raise ValueError(f"--budgets takes a comma-separated list of budgets, got {text!r}")
    return budgets


def _load_exported(path: str):
    if not os.path.isfile(path):  # before torch.export.load, which logs its own traceback first
        raise ValueError(f"cannot read {path!r}: no such file")
    try:
        program = torch.export.load(path)
    except Exception as e:
        raise ValueError(f"cannot read {path!r} as a torch.export program: {type(e).__name__}: {e}") from None
    return program.graph_module


def cmd_models(args) -> int:
    for name, info in describe().items():
        defaults = ", ".join(f"{k}={v}" for k, v in info["defaults"].items())
        print(f"{name:12s} {info['description']}\n{'':12s} defaults: {defaults}")
    return 0


def _measured_costs(args, gm, say):
    """The cost model --calibrate or --profile asks for (None: the analytic model of --device)."""
    calibrating = args.calibrate or args.recalibrate
    if calibrating and args.profile:
        raise ValueError("--calibrate and --profile are alternatives: give one")
    if not (calibrating or args.profile):
        return None

    base = AnalyticCostModel(get_profile(args.device))
    if calibrating:
        say("calibrating: timing every distinct op on this machine (cached)")
        model = calibrate(gm, base=base, refresh=args.recalibrate)
    else:
        model = profile_cost_model(args.profile, base=base)
    say(model.coverage(gm))
    return model


#: --buckets -> optimize's ``bucketing``
BUCKETING = {"auto": "auto", "bitwise": BucketOptions(bitwise=True), "off": False}
#: --decompose -> optimize's ``decomposition``
DECOMPOSITION = {"auto": "auto", "on": True, "off": False}


def cmd_optimize(args) -> int:

    started = time.perf_counter()

    def say(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    if args.exported:
        gm = _load_exported(args.exported)
    else:
        say(f"building model {args.model}")
        gm = build(args.model, **_parse_params(args.param))
    if args.budgets is not None and args.memory_budget is not None:
        raise ValueError("give --memory-budget or --budgets, not both")
    budget = _parse_budgets(args.budgets) if args.budgets is not None else _parse_budget(args.memory_budget)
    cost_model = _measured_costs(args, gm, say)
    res = optimize(gm, time_limit=args.time_limit, memory_budget=budget,
                   device=args.device, compute_streams=args.streams, method=args.method,
                   preserve_collective_order=_collective_order(args), deterministic=not args.wall_clock,
                   cost_model=cost_model, progress=say, bucketing=BUCKETING["bitwise" if args.bitwise else args.buckets],
                   decomposition=DECOMPOSITION["off" if args.bitwise else args.decompose],
                   freeable_inputs=args.freeable_inputs if args.freeable_inputs in ("auto", "held")
                   else [name for name in args.freeable_inputs.split(",") if name])
    print(res.report)
    if not res.report.analysed and (args.trace or args.plot):
        print("no trace or plot: the graph was not analysed", file=sys.stderr)
        args.trace = args.plot = None
    if args.trace:
        res.save_trace(args.trace)
        print(f"trace written to {args.trace} (open in https://ui.perfetto.dev or chrome://tracing)")
    if args.plot:
        res.plot(args.plot)
        print(f"plot written to {args.plot}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res.report.to_dict(), f, indent=2)
        print(f"report written to {args.json}")
    if args.save_module:
        torch.save(res.gm, args.save_module)
        print(f"optimized module written to {args.save_module} (load it with `import solvercast` first, for "
              "the stream anchor ops: torch.load(path, weights_only=False))")
    return 0


def _collective_order(args) -> str:
    """``preserve_collective_order`` from --collective-order and --reorder-collectives (the latter: "free")."""
    if args.reorder_collectives and args.collective_order not in (None, "free"):
        raise ValueError(f"--reorder-collectives is --collective-order free, not {args.collective_order}")
    return "free" if args.reorder_collectives else (args.collective_order or "auto")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="solvercast", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    opt = sub.add_parser("optimize", help="optimize a built-in model or an exported program")
    src = opt.add_mutually_exclusive_group()
    src.add_argument("--model", default="fsdp_layers", help="built-in model (see `solvercast models`)")
    src.add_argument("--exported", help="a program saved with torch.export.save (.pt2)")
    opt.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="model parameter, repeatable")
    opt.add_argument("--time-limit", type=float, default=10.0, help="seconds for the whole optimization")
    opt.add_argument("--memory-budget", default=None,
                     help="bytes (int), ratio of the original peak (float, e.g. 1.0; the default), or none (no budget)")
    opt.add_argument("--budgets", default=None,
                     help="several budgets, e.g. 1.0,1.02,1.05,none: one solve each (the time limit shared), "
                          "the report prints the memory/time frontier; results are the first budget's")
    opt.add_argument("--device", default="h100", help="h100, a100 or h200")
    opt.add_argument("--streams", type=int, default=1, help="compute streams")
    opt.add_argument("--calibrate", action="store_true",
                     help="time every distinct op on this machine (CUDA if present, else CPU; cached, and a cache "
                          "that a few ops timed again disagree with is measured anew) and schedule with those costs; "
                          "the rest from --device's model")
    opt.add_argument("--recalibrate", action="store_true",
                     help="--calibrate, timing every op again instead of reading the cache")
    opt.add_argument("--profile", metavar="TRACE_JSON",
                     help="costs from a torch.profiler Chrome trace of the same program; ops it lacks from "
                          "--device's model")
    opt.add_argument("--method", default="auto", help=methods.help_text())
    opt.add_argument("--reorder-collectives", action="store_true",
                     help="let collectives change their relative order (--collective-order free; unsafe across "
                          "ranks unless all agree)")
    opt.add_argument("--collective-order", choices=("auto", "global", "group", "free"), default=None,
                     help="which collectives keep their original relative order: all (global), those of one process "
                          "group (group: safe when every rank computes the same schedule, as with the deterministic "
                          "time limit and the same costs), none (free); auto (the default): group with the "
                          "deterministic limit on modelled costs, else global")
    opt.add_argument("--buckets", choices=sorted(BUCKETING), default="auto",
                     help="collectives sharing a launch, chosen with the schedule: auto (where they pay), bitwise "
                          "(all_gathers only: results bitwise the same), off")
    opt.add_argument("--decompose", choices=sorted(DECOMPOSITION), default="auto",
                     help="all_gather -> matmul and matmul -> reduce_scatter/all_reduce pairs split into chunks whose "
                          "communication overlaps the matmuls (plain all_reduces written sequence-parallel first), "
                          "the degree chosen with the schedule where it pays (results close, not bitwise): auto "
                          "(on with modelled costs, off with measured ones), on, off")
    opt.add_argument("--bitwise", action="store_true",
                     help="only rewrites whose results are bitwise the original's: --buckets bitwise --decompose off")
    opt.add_argument("--freeable-inputs", default="auto", metavar="auto|held|NAME,...",
                     help="graph inputs the runtime frees after their last use: auto (a torch.compile backward's saved "
                          "activations and tangents; other graphs' inputs held), held, or their names")
    opt.add_argument("--wall-clock", action="store_true", help="wall-clock time limit instead of a deterministic one")
    opt.add_argument("--trace", help="write a Chrome trace (JSON) of baseline and optimized schedules")
    opt.add_argument("--plot", help="write a PNG: Gantt per stream and memory against the budget")
    opt.add_argument("--json", help="write the report as JSON")
    opt.add_argument("--save-module", help="write the optimized GraphModule with torch.save (reordered, with anchors)")
    opt.set_defaults(func=cmd_optimize)
    models = sub.add_parser("models", help="list the built-in models")
    models.set_defaults(func=cmd_models)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (SolvercastError, ValueError, TypeError, OSError) as e:  # OSError: an output file cannot be written
        print(f"solvercast: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
