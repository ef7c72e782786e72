"""FX <-> IR: extract a Problem from a GraphModule, lower a Schedule back (anchor ops for streams), pin
an order for Inductor, and torch.compile's own stream form."""
