"""What an FX node is: its metadata (fxmeta), the facts of its op (ops), its kind (nodes), the collective
kinds (collectives), and running one rank's graph on one process (local_run)."""
