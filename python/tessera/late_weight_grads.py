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

How: autograd's engine runs, of the nodes ready at once, the one made last
(the highest sequence number). A layer taken here computes in its backward
only its input's and its bias's gradients; its weight's comes from a second
node, an identity on the weight made before the step's lookup
(RemoteEmbeddings makes it), so that the engine reaches it only after the
lookup's backward, the push. The weight's gradient is grad_output^T x, what
torch's own linear backward computes, bit for bit.
"""

import torch
import torch.nn.functional as F


class _Pending:
    """What one layer's weight gradient of one step needs: the layer's
    input and its output's gradient, left by the layer's backward."""

    __slots__ = ("x", "grad")

    def __init__(self):
        self.x = None
        self.grad = None


class _WeightAfterPush(torch.autograd.Function):
    """Identity on a layer's weight, made before the lookup; its backward
    computes the weight's gradient (the layer's backward passed zeros)."""

    @staticmethod
    def forward(ctx, weight, pending):
        ctx.pending = pending
        return weight.view_as(weight)

    @staticmethod
    def backward(ctx, _zeros):
        p = ctx.pending
        x, grad = p.x, p.grad
        p.x = p.grad = None
        if grad is None:  # the layer's backward never ran: nothing reached the weight through it
            return None, None
        return grad.t().mm(x), None


class _LinearInputGradFirst(torch.autograd.Function):
    """F.linear whose backward leaves the weight's gradient to
    _WeightAfterPush: it returns zeros for the weight (a broadcast scalar,
    no memory) and hands x and grad_output over."""

    @staticmethod
    def forward(ctx, x, weight, bias, pending):
        ctx.save_for_backward(x, weight)
        ctx.pending = pending
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        dx = grad.mm(weight) if ctx.needs_input_grad[0] else None
        dbias = grad.sum(0) if ctx.needs_input_grad[2] else None
        ctx.pending.x, ctx.pending.grad = x, grad
        return dx, grad.new_zeros(()).expand(weight.shape), dbias, None


class LinearWeightGradAfterPush(torch.nn.Linear):
    """torch.nn.Linear (the same parameters, state_dict and results) whose
    weight gradient is computed after the push of a RemoteEmbeddings that
    took it (RemoteEmbeddings.push_before_weight_grads). Outside training,
    without a lookup since its last forward, or on an input that is not
    2-D (batch x features), it is torch.nn.Linear."""

    def forward(self, x):
        late = self.__dict__.pop("_tessera_late_weight", None)
        # A node made before the weight last changed (a layer that runs before the lookup finds the last
        # step's, unused, after the optimizer's step) is stale: autograd refuses a view whose base changed.
        if late is None or late[2] != self.weight._version or x.dim() != 2 or not torch.is_grad_enabled():
            return F.linear(x, self.weight, self.bias)
        weight, pending, _ = late
        return _LinearInputGradFirst.apply(x, weight, self.bias, pending)


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
    """Before a training lookup: each layer's weight gets this step's
    identity node, which its next forward uses while the weight is
    unchanged. Layers that run before the lookup do not need it (their
    nodes come before the lookup's anyway) and ignore it once stale."""
    for layer in layers:
        if layer.weight.requires_grad:
            pending = _Pending()
            node = _WeightAfterPush.apply(layer.weight, pending)
            layer.__dict__["_tessera_late_weight"] = (node, pending, layer.weight._version)
