"""Tests of the experiments' scripts (experiments/): the sweep, gpu_overlap on CPU, gpu_check, every --help."""
