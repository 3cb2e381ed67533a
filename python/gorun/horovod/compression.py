"""Gradient compression for allreduce and DistributedOptimizer (Horovod's
Compression.none and Compression.fp16)."""

import torch


class Compressor:
    """Turns a tensor into what moves (compress) and back (decompress)."""

    @staticmethod
    def compress(tensor):
        """Returns (tensor to move, context for decompress)."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Moves tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Moves floating-point tensors as float16 (gorun sums them in float32
    and rounds once); other types as they are."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != torch.float16:
            return tensor.type(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.type(ctx) if ctx is not None else tensor


class Compression:
    """The compression algorithms: Compression.none, Compression.fp16."""

    none = NoneCompressor
    fp16 = FP16Compressor
