"""Random inputs for running one rank's graph locally keep what the graph relies on: each placeholder's
shape, dtype (complex ones too) and strides."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from solvercast.graph.local_run import random_inputs, run_local


def test_inputs_keep_their_placeholders_strides_and_complex_dtypes():
    def step(a, freqs):
        # a (2, 8, 4, 3) laid out as a transposed (2, 4, 8, 3): viewing it merged needs those strides
        return a.permute(0, 2, 1, 3).view(2, 8, 12), torch.view_as_real(freqs)

    a = torch.empty(2, 4, 8, 3).permute(0, 2, 1, 3)
    gm = make_fx(step, tracing_mode="fake")(a, torch.empty(5, dtype=torch.complex64))
    args = random_inputs(gm, seed=2)
    assert args[0].stride() == a.stride() and args[1].dtype == torch.complex64
    merged, real = run_local(gm, args)
    assert merged.shape == (2, 8, 12) and real.shape == (5, 2) and real.abs().sum() > 0
