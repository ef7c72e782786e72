"""Programs a fuzz found failing, kept as they were generated: each module has the program ``f``, its inputs'
``PARAMS`` (name, shape), and ``G``, the process group its collectives name, bound by `program`."""

import importlib

from solvercast.models import fake_group


def program(name: str):
    """(f, input shapes) of the program in module ``name``, its group ``G`` a fake group of 4 ranks."""
    module = importlib.import_module(f"{__name__}.{name}")
    module.G = fake_group(4, tag="fuzz")
    return module.f, [shape for _, shape in module.PARAMS]
