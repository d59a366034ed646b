"""Linear layers whose weight gradients autograd computes after the
embeddings' push.

In a synchronous job the servers apply a step, and answer the next step's
prefetched lookups, only once every trainer's push is in. A trainer that
pushes at the end of its backward makes the servers wait for its whole
dense backward, and then waits for them. The push needs only the input
gradients of the layers between the embeddings and the loss, not their
weight gradients (half of each layer's backward, and all of the layers that
do not lead to the embeddings): the C++ trainer pushes as soon as those are
computed (docs/design.md, section 4), and these layers let a PyTorch model
do the same.

How: before each training lookup, open_step makes one autograd node for
the step, _WeightGradsAfterPush, on every taken layer's weight and bias. Its
first output is the lookup's anchor, an input of the lookup's node; the
others are stand-ins for the biases (the bias itself, as a view; zeros for
a layer without one). A taken layer computes F.linear(x, weight.detach(),
stand-in): torch's own backward of it gives the input's gradient and the
stand-in's (the bias's), but none for the weight, and a hook on the output
keeps its gradient. The node needs the lookup's gradient and every
stand-in's before it runs, so autograd runs it after the push and after
every layer's backward, on any device: there it computes each weight's
gradient, grad_output^T x, what torch's linear backward computes, bit for
bit, and hands the biases theirs.

The order comes from the graph itself, not from the engine's choice among
ready nodes (which runs the one made last, and only within one device's
thread): it holds for layers on a GPU too. It costs the main thread about
what a custom Function per layer did, some 56 us a step for three layers
(bench/torch_step_overhead.py).
"""

import torch
import torch.nn.functional as F


class _Pending:
    """What one layer's weight gradient of one step needs: its input (and
    the input's version, to refuse one changed in place since) and its
    output's gradient, which the hook leaves."""

    __slots__ = ("x", "x_version", "grad")

    def __init__(self):
        self.x = None
        self.x_version = 0
        self.grad = None

    def keep_grad(self, grad):
        self.grad = grad


class _WeightGradsAfterPush(torch.autograd.Function):
    """forward(pendings, has_bias, *weights_then_biases) -> (anchor, stand-in
    per layer). Backward: each used layer's weight gradient from its
    pending, and the stand-ins' gradients to the biases."""

    @staticmethod
    def forward(ctx, pendings, has_bias, *params):
        ctx.pendings = pendings
        ctx.has_bias = has_bias
        # Unused stand-ins (a layer that did not run, or ran as a plain one) give None, not zeros to sum.
        ctx.set_materialize_grads(False)
        weights, biases = params[:len(pendings)], iter(params[len(pendings):])
        stand_ins = []
        for w, b in zip(weights, has_bias):
            if b:
                bias = next(biases)
                stand_ins.append(bias.view_as(bias))
            else:
                stand_ins.append(w.new_zeros(w.shape[0]))
        return (torch.empty(0),) + tuple(stand_ins)

    @staticmethod
    def backward(ctx, _anchor, *stand_in_grads):
        weight_grads = []
        for p in ctx.pendings:
            x, grad = p.x, p.grad
            p.x = p.grad = None
            if grad is None:  # the layer did not run as a taken one, or its output led nowhere
                weight_grads.append(None)
                continue
            if x._version != p.x_version:
                raise RuntimeError("a layer's input was modified in place after a LinearWeightGradAfterPush layer "
                                   "used it: its weight gradient needs the input as the layer saw it")
            weight_grads.append(grad.t().mm(x))
        bias_grads = [g for g, b in zip(stand_in_grads, ctx.has_bias) if b]
        return (None, None) + tuple(weight_grads) + tuple(bias_grads)


class LinearWeightGradAfterPush(torch.nn.Linear):
    """torch.nn.Linear (the same parameters, state_dict and results) whose
    weight gradient is computed after the push of a RemoteEmbeddings that
    took it (RemoteEmbeddings.push_before_weight_grads). Outside training,
    without a lookup since its last forward, or on an input that is not
    2-D (batch x features), it is torch.nn.Linear."""

    def forward(self, x):
        late = self.__dict__.pop("_tessera_late_weight", None)
        # A step opened before the weight or bias last changed (a layer that runs before the lookup finds the
        # last step's, unused, after the optimizer's step) is stale: autograd refuses a view whose base changed.
        if (late is None or late[2] != self.weight._version or late[3] != _version(self.bias) or x.dim() != 2
                or not torch.is_grad_enabled()):
            return F.linear(x, self.weight, self.bias)
        pending, stand_in = late[0], late[1]
        y = F.linear(x, self.weight.detach(), stand_in)
        pending.x, pending.x_version = x, x._version
        y.register_hook(pending.keep_grad)
        return y


def _version(t):
    return -1 if t is None else t._version


def take_linear_layers(module):
    """Turns every torch.nn.Linear of `module` (itself included) into a
    LinearWeightGradAfterPush, in place (its class changes; parameters,
    hooks and the module tree stay). Returns the layers taken. Subclasses of
    nn.Linear are left alone: their forward is their own."""
    taken = []
    for m in module.modules():
        if type(m) is torch.nn.Linear:
            m.__class__ = LinearWeightGradAfterPush
        if type(m) is LinearWeightGradAfterPush:
            taken.append(m)
    return taken


def open_step(layers):
    """Before a training lookup: makes the step's node over `layers` (those
    whose weight needs a gradient) and returns the anchor the lookup's node
    takes, so that the node runs after the lookup's backward; each layer's
    next forward uses the node's stand-in while its weight and bias are
    unchanged. Without such layers the anchor is a plain leaf. Layers that
    run before the lookup do not need the node (their backward comes after
    the lookup's anyway) and ignore it once stale."""
    layers = [m for m in layers if m.weight.requires_grad]
    if not layers:
        return torch.empty(0, requires_grad=True)
    pendings = [_Pending() for _ in layers]
    has_bias = tuple(m.bias is not None for m in layers)
    outs = _WeightGradsAfterPush.apply(pendings, has_bias, *[m.weight for m in layers],
                                       *[m.bias for m in layers if m.bias is not None])
    for m, pending, stand_in in zip(layers, pendings, outs[1:]):
        m.__dict__["_tessera_late_weight"] = (pending, stand_in, m.weight._version, _version(m.bias))
    return outs[0]
