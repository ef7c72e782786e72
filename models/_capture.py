"""Graphs that PyTorch's own machinery makes: captured from torch.compile's post-grad hook.

`capture_post_grad(fn, args)` compiles ``fn`` with ``torch.compile(backend="inductor")`` and keeps
what Inductor's post-grad custom pass (``torch._inductor.config.post_grad_custom_post_pass``) sees:
the forward graph and, when an input requires grad, the backward graph (AOTAutograd lowers the
backward at once with ``torch._functorch.config.force_non_lazy_backward_lowering``). Each is a
GraphModule whose nodes carry ``meta["val"]`` fake tensors.

Inductor's own code generation is skipped: the inner compiler runs exactly the steps Inductor
runs before its post-grad passes (``view_to_reshape``, fake tensor propagation) and the post-grad
passes themselves, hands the graph to the hook, then stops the compile. No kernel is compiled
and nothing runs, so inputs may be fake tensors of any size (Llama-3-8B dimensions on a laptop).

`fake_mesh(shape, names)` makes the default process group (``fake`` backend) for the duration of
one build when the process has none: DTensor's ``DeviceMesh`` needs it. Afterwards the default
group is destroyed again, and in any case the captured graphs name solvercast's stand-alone fake groups instead (`fake_group` with the mesh
dimension's name as tag), so the graphs stay resolvable (group sizes for the cost model) and
deterministic.
"""

from __future__ import annotations

import contextlib
import copy
import math
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.fx as fx

from solvercast.errors import CaptureError

from ._tracing import fake_group, restore_fake_groups

__all__ = ["CaptureError", "capture_post_grad", "fake_mesh", "rename_groups"]


class _Captured(Exception):
    """Raised from the inner compiler once every graph is captured: stops the compile."""


def _post_grad_only(graphs: list[fx.GraphModule], expected: int) -> Callable[..., Any]:
    """An Inductor ``inner_compile`` that runs Inductor's post-grad passes with our hook and no codegen."""
    from torch._inductor.compile_fx import _recursive_post_grad_passes, fake_tensor_prop
    from torch._inductor.fx_passes.post_grad import view_to_reshape
    from torch._inductor.virtualized import V

    def inner(gm: fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
        # the steps of Inductor's codegen_and_compile up to and including its post-grad passes
        view_to_reshape(gm)
        with torch.no_grad():
            fake_mode = fake_tensor_prop(gm, example_inputs)
        with V.set_fake_mode(fake_mode):
            _recursive_post_grad_passes(gm, is_inference=kwargs.get("is_inference", False))
        if len(graphs) >= expected:
            raise _Captured()
        from torch._functorch.aot_autograd import make_boxed_func

        return make_boxed_func(gm.forward)  # never run: the backward's compile stops the capture

    return inner


def _keep(graphs: list[fx.GraphModule]) -> Callable[[fx.Graph], None]:
    def hook(graph: fx.Graph) -> None:
        gm = fx.GraphModule(torch.nn.Module(), copy.deepcopy(graph))
        # deepcopy keeps node.meta (fake tensors included); get_attr targets are not expected in
        # these graphs (parameters are graph inputs after AOTAutograd)
        graphs.append(gm)

    return hook


def capture_post_grad(fn: Callable[..., Any], args: Sequence[Any], backward: bool) -> list[fx.GraphModule]:
    """``[forward]`` or ``[forward, backward]`` post-grad graphs of ``torch.compile(fn)(*args)``.

    Raises `CaptureError` when the compile does not reach the post-grad hook for every graph
    (a graph break, or an error in Dynamo / AOTAutograd, chained)."""
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx

    expected = 2 if backward else 1
    graphs: list[fx.GraphModule] = []
    inner = _post_grad_only(graphs, expected)

    def backend(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        return compile_fx(gm, example_inputs, inner_compile=inner)

    torch._dynamo.reset()
    error: BaseException | None = None
    try:
        with inductor_config.patch(post_grad_custom_post_pass=_keep(graphs), force_disable_caches=True), \
                torch._functorch.config.patch(force_non_lazy_backward_lowering=True):
            torch.compile(fn, backend=backend, fullgraph=True)(*args)
    except Exception as e:  # _Captured arrives wrapped in Dynamo's BackendCompilerFailed
        error = e
    finally:
        torch._dynamo.reset()
    if len(graphs) != expected:
        raise CaptureError(f"torch.compile gave the post-grad hook {len(graphs)} graph(s), expected {expected}"
                           + (f": {type(error).__name__}: {str(error)[:500]}" if error else "")) from error
    return graphs


@contextlib.contextmanager
def fake_mesh(shape: Sequence[int], names: Sequence[str]) -> Iterator[Any]:
    """A CPU ``DeviceMesh`` of ``shape`` over the ``fake`` backend (we are rank 0). Without a default
    process group, one of ``prod(shape)`` fake ranks is made for the duration of the block; a fake
    default group that exists already (another user's) is used as is when it has enough ranks (the
    mesh takes its first ones). Raises ``RuntimeError`` for any other default group."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    ranks = math.prod(shape)
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group("fake", rank=0, world_size=ranks, store=FakeStore())
    elif dist.get_backend() != "fake" or dist.get_world_size() < ranks or dist.get_rank() != 0:
        raise RuntimeError(f"building a DTensor model needs a fake default process group of >= {ranks} ranks "
                           f"(rank 0); this process has a {dist.get_backend()!r} one of {dist.get_world_size()}: "
                           "build it in a process that has not called init_process_group")
    try:
        yield DeviceMesh("cpu", torch.arange(ranks).view(tuple(shape)), mesh_dim_names=tuple(names))
    finally:
        if owned:
            dist.destroy_process_group()  # which unregisters every group, solvercast's fake ones too:
            restore_fake_groups()  # graphs built before this one name them


def rename_groups(gm: fx.GraphModule, names: dict[str, str]) -> None:
    """Replace process-group names (string arguments of c10d ops) by ``names[old]``, in place."""
    for node in gm.graph.nodes:
        if node.op != "call_function" or getattr(node.target, "namespace", None) not in ("_c10d_functional", "c10d"):
            continue
        node.args = tuple(names.get(a, a) if isinstance(a, str) else a for a in node.args)
        node.kwargs = {k: names.get(v, v) if isinstance(v, str) else v for k, v in node.kwargs.items()}
    gm.recompile()


def mesh_group_names(mesh: Any) -> dict[str, str]:
    """The mesh's process-group names -> solvercast's stand-alone fake groups (one per mesh dimension,
    tagged with its name)."""
    out = {}
    for dim, name in enumerate(mesh.mesh_dim_names):
        group = mesh.get_group(dim)
        out[group.group_name] = fake_group(group.size(), tag=name)
    return out
