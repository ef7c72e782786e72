"""Measurements on a GPU (and their CPU stand-ins); gpu_check runs them all."""
