"""The test suite: a folder per subpackage of solvercast, end_to_end for the whole path, support for the helpers."""
