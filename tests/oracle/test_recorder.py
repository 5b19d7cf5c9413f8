"""The oracle's recorder and shims on hand-counted steps (label oracle).

Each case has bytes worked out by hand from what PyTorch allocates, so a recorder
that misses a free, counts a view twice, or lets autocast or SDPA run as they do
on a bare meta device fails here.
"""

import contextlib
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "oracle"))

from cuda_autocast import check_policy_table, cuda_autocast_on_meta  # noqa: E402
from ctx_saves import ctx_saves_marked  # noqa: E402
from cuda_shims import (BalancedExpertCounts, cuda_dropout_on_meta, cuda_sdpa_on_meta,  # noqa: E402
                        fused_optimizers_on_meta)
from meta_recorder import Recorder, recording  # noqa: E402

MiB = 2 ** 20


def meta(*shape, dtype=torch.float32, grad=False):
    return torch.empty(*shape, dtype=dtype, device="meta", requires_grad=grad)


class RecorderTest(unittest.TestCase):
    def test_peak_counts_outputs_before_inputs_are_dropped(self):
        rec = Recorder()
        with recording(rec):
            x = meta(1024, 256)          # 1 MiB
            y = x * 2                    # 1 MiB while x lives
            del x
            z = y + 1                    # 1 MiB; x is gone, so still 2 MiB live
            del y
            w = z.view(256, 1024)        # a view: no bytes
            del z, w
        self.assertEqual(rec.peak_bytes, 2 * MiB)
        self.assertEqual(rec.live_bytes, 0)

    def _tied_weight_peak(self, cast: bool) -> int:
        """A weight used by an embedding, then by a linear (through a bf16 copy when
        `cast`); backward reaches the linear first, so the embedding's gradient is
        summed into the buffer holding the linear's."""
        rec = Recorder()
        weight = meta(1024, 256, grad=True)           # 1 MiB fp32
        ids = torch.zeros(64, dtype=torch.long, device="meta")
        rec.adopt([weight, ids], "parameter")
        with recording(rec):
            rec.begin("step")
            h = torch.nn.functional.embedding(ids, weight)
            w = weight.to(torch.bfloat16) if cast else weight
            out = torch.nn.functional.linear(h.to(w.dtype), w)
            out.sum().backward()
            del h, w, out
        return rec.peak_bytes - MiB  # beside the weight

    def test_an_accumulation_autograd_does_in_place_adds_no_copy(self):
        # No cast: the linear's weight gradient reaches the buffer as a transposed view
        # (TBackward0 of mm), which the engine sums out of place (profiled on the CPU
        # without a dispatch mode: aten::add): the buffer, the embedding's gradient and
        # the sum, 3 MiB.
        self.assertEqual(self._tied_weight_peak(cast=False) // MiB, 3)
        # Through a cast: the buffer holds the cast's fresh fp32 gradient and the engine
        # adds in place (aten::add_ on the CPU): the buffer and the embedding's gradient,
        # 2 MiB. Under the recorder's mode the engine still adds out of place; the
        # recorder drops that peak because the buffer dies with the sum.
        self.assertEqual(self._tied_weight_peak(cast=True) // MiB, 2)

    def test_saved_tensors_and_gradients_are_categorised(self):
        rec = Recorder()
        weight = meta(512, 512, grad=True)  # 1 MiB
        rec.adopt([weight], "parameter")
        rec.mark("parameters", [weight])
        weight.register_post_accumulate_grad_hook(lambda p: rec.mark("gradients", [p.grad]))
        with recording(rec):
            x = meta(512, 512)
            h = torch.tanh(x @ weight)      # tanh saves its output
            del x
            h.sum().backward()
            del h
        self.assertEqual(rec.at_peak()["parameters"], MiB)
        totals = rec.at_peak()
        # the peak is mm's backward: weight, x (saved by mm), h (tanh's output, saved by
        # tanh, whose node has run backward and let it go: held by the name `h` only, a
        # transient), tanh's input gradient and the weight's gradient, 1 MiB each, plus
        # the loss and its gradient (4 bytes each)
        self.assertEqual(rec.peak_bytes, 5 * MiB + 8)
        self.assertEqual(totals["saved_activations"], MiB)
        self.assertEqual(totals["transient"], 2 * MiB + 8)
        self.assertEqual(totals["gradients"], MiB)
        self.assertEqual(weight.grad.dtype, torch.float32)

    def test_a_saved_gradient_handed_on_in_backward_is_in_flight(self):
        # Liger's fused linear cross-entropy (liger-kernel 0.8.5
        # ops/fused_linear_cross_entropy.py) makes the weight's and the input's gradients
        # in forward, saves them, and returns them in backward. The weight is tied to an
        # embedding, whose backward runs last: by then autograd has released the
        # Function's saved variables and the weight's gradient waits in the engine's
        # input buffer, a gradient in flight (docs/memory-model.md, "Categories at the peak")
        rec = Recorder()
        weight = meta(512, 512, grad=True)                  # 1 MiB fp32
        ids = torch.zeros(64, dtype=torch.long, device="meta")
        rec.adopt([weight, ids], "parameter")
        rec.mark("parameters", [weight])
        with recording(rec):
            rec.begin("step")
            h = torch.nn.functional.embedding(ids, weight)  # 128 KiB
            loss = _GradientsInForward.apply(h, weight)
            del h
            loss.backward()
            del loss
        # the peak is the embedding's backward: the weight, the Function's weight gradient
        # in the buffer, the embedding's dense gradient (1 MiB each), the input gradient
        # it is given (128 KiB), the loss and its gradient (4 bytes each)
        self.assertEqual(rec.peak_bytes, 3 * MiB + 128 * 1024 + 512 + 8)
        totals = rec.at_peak()
        self.assertEqual(totals["saved_activations"], 512)  # the ids the embedding's backward keeps
        self.assertEqual(totals["transient"], 2 * MiB + 128 * 1024 + 8)

    def test_storage_resized_in_place_is_allocated_and_freed(self):
        # FSDP2's free_storage / alloc_storage of an unsharded parameter (_fsdp_param.py)
        rec = Recorder()
        with recording(rec):
            x = meta(1024, 256)                      # 1 MiB
            x.untyped_storage().resize_(0)           # freed in place
            self.assertEqual(rec.live_bytes, 0)
            y = meta(1024, 512)                      # 2 MiB while x holds nothing
            x.untyped_storage().resize_(MiB)         # 1 MiB again: 3 MiB live
            self.assertEqual(rec.at_peak()["transient"], 3 * MiB)
            x.untyped_storage().resize_(0)
            del x, y
        self.assertEqual(rec.peak_bytes, 3 * MiB)
        self.assertEqual(rec.live_bytes, 0)

    def test_disowned_storages_and_their_views_are_not_counted(self):
        # DeepSpeed's ZeRO-1/2 keep meta zeros_like copies of parameters for their shapes
        rec = Recorder()
        with recording(rec):
            record = torch.zeros_like(meta(1024, 256), device="meta")  # 1 MiB
            rec.disown([record])
            view = record.view(-1)[:1024]  # a view of it: still nothing
            kept = meta(1024, 256)         # 1 MiB, counted
            self.assertEqual(rec.live_bytes, MiB)
            del record, view, kept
        self.assertEqual(rec.live_bytes, 0)

    def test_scalar_reads_of_meta_tensors(self):
        rec = Recorder()
        with recording(rec):
            self.assertTrue(bool((meta(4) > 0).all()))
            with self.assertRaises(RuntimeError):
                meta(4).sum().item()


class _GradientsInForward(torch.autograd.Function):
    """Liger's LigerFusedLinearCrossEntropyFunction's way: the gradients are made in
    forward, kept with save_for_backward and returned as they are in backward."""

    @staticmethod
    def forward(ctx, x, weight):
        grad_input, grad_weight = torch.zeros_like(x), torch.zeros_like(weight)
        ctx.save_for_backward(grad_input, grad_weight)
        return x.new_zeros(())

    @staticmethod
    def backward(ctx, grad):
        grad_input, grad_weight = ctx.saved_tensors
        return grad_input, grad_weight


class _CtxHeldMatMul(torch.autograd.Function):
    """bitsandbytes 0.43.1's MatMul4Bit's way of keeping tensors for backward:
    `ctx.tensors = (A, B)`, no save_for_backward (bitsandbytes/autograd/_functions.py)."""

    @staticmethod
    def forward(ctx, A, B, out=None, bias=None, quant_state=None):
        ctx.tensors = (A, B)
        return A @ B

    @staticmethod
    def backward(ctx, grad):
        A, B = ctx.tensors
        return grad @ B.t(), A.t() @ grad, None, None, None


class CtxSavesTest(unittest.TestCase):
    """bench/oracle/ctx_saves.py on a stand-in for bitsandbytes' autograd module."""

    def setUp(self):
        import types
        self.saved_modules = {n: sys.modules.get(n) for n in
                              ("bitsandbytes", "bitsandbytes.autograd", "bitsandbytes.autograd._functions")}
        functions = types.ModuleType("bitsandbytes.autograd._functions")
        functions.MatMul4Bit = _CtxHeldMatMul
        autograd = types.ModuleType("bitsandbytes.autograd")
        autograd._functions = functions
        package = types.ModuleType("bitsandbytes")
        package.autograd = autograd
        sys.modules.update({"bitsandbytes": package, "bitsandbytes.autograd": autograd,
                            "bitsandbytes.autograd._functions": functions})

    def tearDown(self):
        for name, module in self.saved_modules.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module

    def _at_peak(self, marked: bool) -> dict:
        rec = Recorder()
        # 1 MiB, left a transient as FSDP1's gathered weight is: the weight the Function
        # is given stays what it was, only its input becomes a saved activation
        weight = torch.nn.Parameter(meta(512, 512))
        rec.adopt([weight], "parameter")
        shim = ctx_saves_marked(rec) if marked else contextlib.nullcontext()
        with shim, recording(rec):
            x = meta(512, 512, grad=True)               # 1 MiB, kept on ctx
            y = _CtxHeldMatMul.apply(x * 1, weight.t())  # x * 1: the input A, 1 MiB
            del x
            y.sum().backward()
            del y
        return rec.at_peak()

    def test_a_functions_ctx_held_input_is_a_saved_activation(self):
        marked = self._at_peak(True)
        self.assertEqual(marked["saved_activations"], MiB)  # A; the weight is not marked
        unmarked = self._at_peak(False)
        self.assertEqual(unmarked["saved_activations"], 0)
        self.assertEqual(unmarked["transient"], marked["transient"] + MiB)


class CudaAutocastTest(unittest.TestCase):
    def test_policy_covers_every_cuda_autocast_op_of_this_torch(self):
        self.assertEqual(check_policy_table(), [])

    def test_matmul_in_bf16_softmax_in_fp32_weight_cast_once(self):
        weight = meta(64, 64, grad=True)
        x = meta(8, 64)
        with cuda_autocast_on_meta(), torch.autocast("cpu", dtype=torch.bfloat16):
            a = torch.nn.functional.linear(x, weight)
            b = torch.nn.functional.linear(x, weight)
            self.assertEqual(a.dtype, torch.bfloat16)
            self.assertEqual(torch.softmax(a, -1).dtype, torch.float32)
            self.assertEqual(torch.cat([a, x]).dtype, torch.float32)  # CPU-only policy: none
            # autocast_mode.cpp cached_cast: one 16-bit copy of an fp32 leaf weight
            cast_a = a.grad_fn.next_functions[1][0].next_functions[0][0]
            cast_b = b.grad_fn.next_functions[1][0].next_functions[0][0]
            self.assertIs(cast_a, cast_b)
        self.assertEqual(torch.nn.functional.linear(x, weight).dtype, torch.float32)

    def test_without_the_stack_entering_autocast_nothing_is_cast(self):
        with cuda_autocast_on_meta():
            self.assertEqual((meta(4, 4) @ meta(4, 4)).dtype, torch.float32)

    def test_asking_for_cuda_autocast_answers_the_autocast_standing_in(self):
        # PEFT's bnb LoRA layers ask torch.is_autocast_enabled() (CUDA's) whether to copy
        # their input to fp32; on a GPU under the stack's autocast the answer is yes.
        with cuda_autocast_on_meta():
            self.assertFalse(torch.is_autocast_enabled())
            with torch.autocast("cpu", dtype=torch.bfloat16):
                self.assertTrue(torch.is_autocast_enabled())
                self.assertTrue(torch.is_autocast_enabled("cuda"))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            self.assertFalse(torch.is_autocast_enabled())  # restored: CUDA's again


class CudaKernelShimTest(unittest.TestCase):
    def test_sdpa_keeps_no_probabilities(self):
        rec = Recorder()
        q = meta(1, 8, 1024, 64, dtype=torch.bfloat16, grad=True)
        with cuda_sdpa_on_meta(), recording(rec):
            out = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
            saved = rec.at_peak()["saved_activations"]
            del out
        # the flash kernel keeps its output, a float32 logsumexp [1, 8, 1024] and the
        # RNG's seed and offset (uint64, 1 + 2), never the [1024, 1024] probabilities
        self.assertEqual(saved, 1 * 8 * 1024 * 64 * 2 + 8 * 1024 * 4 + 3 * 8)

    def test_dropout_keeps_a_bool_mask(self):
        rec = Recorder()
        x = meta(1024, 1024, grad=True)  # fp32: the composite path would keep a 4 MiB mask
        with cuda_dropout_on_meta(), recording(rec):
            y = torch.nn.functional.dropout(x, 0.1, training=True)
            saved = rec.at_peak()["saved_activations"]
            self.assertIs(torch.nn.functional.dropout(x, 0.1, training=False), x)
            del y
        self.assertEqual(saved, 1024 * 1024)  # native_dropout's bool mask

    def test_fused_adamw_steps_on_meta(self):
        p = torch.nn.Parameter(meta(256, 256))
        p.grad = meta(256, 256)
        opt = torch.optim.AdamW([p], fused=True)
        with fused_optimizers_on_meta():
            opt.step()
        self.assertEqual(sorted(opt.state[p]), ["exp_avg", "exp_avg_sq", "step"])

    def test_deepseek_v2_counts_are_balanced_on_meta(self):
        # DeepseekV2MoE.moe (transformers 4.57.6) reads tokens_per_expert in Python:
        # the counts, their running sum and the `== 0` test are answered as balanced
        # routing (k*T/E rows each, floor or ceil), so each expert's slice has them.
        tokens, experts, k, hidden = 10, 4, 3, 8
        topk_ids = torch.empty(tokens, k, dtype=torch.long, device="meta")
        sorted_tokens = meta(tokens * k, hidden)
        sizes = []
        with BalancedExpertCounts(experts, k):
            cnts = topk_ids.new_zeros((tokens, experts))
            cnts.scatter_(1, topk_ids, 1)
            start = 0
            for num_tokens in cnts.sum(dim=0):
                if num_tokens == 0:
                    continue
                end = start + num_tokens
                sizes.append(sorted_tokens[start:end].shape[0])
                start = end
        self.assertEqual(sizes, [7, 8, 7, 8])  # 30 pairs over 4 experts

    def test_default_adamw_takes_foreach_as_on_cuda(self):
        # torch/optim/optimizer.py _default_to_fused_or_foreach: foreach on CUDA; without
        # the shim, meta runs the for-loop, whose temporaries are one tensor at a time
        params = [torch.nn.Parameter(meta(256, 256)) for _ in range(3)]
        for p in params:
            p.grad = meta(256, 256)
        opt = torch.optim.AdamW(params)
        rec = Recorder()
        with fused_optimizers_on_meta(), recording(rec):
            opt.step()
            rec.mark("optimizer_states", [t for s in opt.state.values() for t in s.values()])
        names = {op["op"] for op in rec.ops}
        self.assertIn("_foreach_sqrt", names)
        self.assertNotIn("sqrt", names)
        # one sqrt list beside the states: 3 x 256 KiB at the peak, over the 6 states
        self.assertEqual(rec.at_peak()["transient"], 3 * 256 * 256 * 4)


if __name__ == "__main__":
    unittest.main()
