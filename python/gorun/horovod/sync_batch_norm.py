"""SyncBatchNorm: batch normalization over the batch of every rank."""

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from ._ops import Sum, allreduce, global_process_set, size


class SyncBatchNorm(_BatchNorm):
    """Batch normalization whose statistics are those of every rank's batch
    together (in training); in eval it uses the running statistics, as
    torch.nn.BatchNorm does. Weight and bias gradients stay per rank (the
    DistributedOptimizer averages them)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        if not self.training or size() == 1:
            return super().forward(input)
        momentum = self.momentum
        if self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked)
        return _SyncBN.apply(input, self.weight, self.bias, self.running_mean, self.running_var, self.eps,
                             momentum if momentum is not None else 0.0, self.process_set)


def _per_channel(x):
    """x as (channels, everything else)."""
    return x.transpose(0, 1).reshape(x.shape[1], -1)


def _bcast(v, x):
    return v.view((1, -1) + (1,) * (x.dim() - 2))


class _SyncBN(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, process_set):
        xc = _per_channel(x)
        count = torch.tensor([float(xc.shape[1])], dtype=xc.dtype)
        stats = allreduce(torch.cat([xc.sum(1), (xc * xc).sum(1), count]), op=Sum, name=None,
                          process_set=process_set)
        c = x.shape[1]
        n = float(stats[-1])
        mean = stats[:c] / n
        var = stats[c:2 * c] / n - mean * mean
        invstd = torch.rsqrt(var.clamp(min=0) + eps)
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean.detach() * momentum)
        if running_var is not None:
            running_var.mul_(1 - momentum).add_(var.detach() * (n / max(n - 1, 1)) * momentum)
        xhat = (x - _bcast(mean, x)) * _bcast(invstd, x)
        ctx.save_for_backward(xhat, weight, invstd)
        ctx.n, ctx.ps = n, process_set
        y = xhat
        if weight is not None:
            y = y * _bcast(weight, x) + _bcast(bias, x)
        return y

    @staticmethod
    def backward(ctx, dy):
        xhat, weight, invstd = ctx.saved_tensors
        dyc, xc = _per_channel(dy), _per_channel(xhat)
        sum_dy, sum_dy_xhat = dyc.sum(1), (dyc * xc).sum(1)
        both = allreduce(torch.cat([sum_dy, sum_dy_xhat]), op=Sum, process_set=ctx.ps)
        c = dy.shape[1]
        g_sum_dy, g_sum_dy_xhat = both[:c], both[c:]
        scale = invstd if weight is None else invstd * weight
        dx = _bcast(scale, dy) * (dy - _bcast(g_sum_dy / ctx.n, dy) - xhat * _bcast(g_sum_dy_xhat / ctx.n, dy))
        dw = sum_dy_xhat if weight is not None else None
        db = sum_dy if weight is not None else None
        return dx, dw, db, None, None, None, None, None


