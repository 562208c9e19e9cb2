"""The patch layer on CPU: which modules are matched and replaced, weight padding, the
fuseprof::* operators (schemas, fake implementations, CPU references) and the numerics
comparison. Run by fusion-advisor/tests/patch_layer.rs with the patch folder on PYTHONPATH;
needs torch, timm and transformers (the README's test command installs them).

The fused path runs on CPU through the operators' reference implementations, which are the
definitions the CUDA kernels are checked against; the patched module's output is compared
with the original module's, as on the GPU.
"""
import copy
import json
import os
import tempfile
import unittest

os.environ["FUSEPROF_PATCH"] = "1"
os.environ.pop("FUSEPROF_PATCH_APPLY", None)
os.environ["FUSEPROF_PATCH_CPP"] = "0"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import fuseprof_patch as fp  # noqa: E402
import fuseprof_patch_ops as ops  # noqa: E402
import fuseprof_settings as settings  # noqa: E402

fp.DEVICES.add("cpu")
ops.register()
import timm  # noqa: E402
import transformers  # noqa: E402

fp._patch_torch(torch)
fp._patch_timm(timm)
fp._patch_transformers(transformers)


def second_call(fn):
    """Runs fn again with the operator counts cleared: what every call after the first runs (the
    first also runs the original to compare, and the model through the graph matcher's
    capture)."""
    ops.REFERENCE_CALLS.clear()
    return fn()


def reset():
    rep = fp.report()
    for k in ("modules", "models", "left_alone", "approximations", "patched", "eager_choice"):
        rep[k].clear()
    ops.REFERENCE_CALLS.clear()


class Operators(unittest.TestCase):
    """Each operator's fake implementation agrees with its reference (torch.library.opcheck)."""

    def check(self, op, *args):
        torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor"))

    def test_opcheck(self):
        torch.manual_seed(0)
        x = torch.randn(2, 9, 9, 16)
        g, b = torch.randn(16), torch.randn(16)
        self.check(torch.ops.fuseprof.ln_shift_partition.default, x, g, b, 7, 3, 1e-5)
        qkv = torch.randn(8 * 49, 3 * 2 * 32)
        add = ops.attention_add(2, 49, torch.randn(2, 49, 49), torch.randn(4, 49, 49))
        self.check(torch.ops.fuseprof.window_attention.default, qkv, add, 2, 49, 0.17)
        self.check(torch.ops.fuseprof.attention.default, torch.randn(3 * 10, 3 * 64), 1, 10, 0.125,
                   torch.zeros(3, 10))
        w = torch.randn(8 * 49, 49, 16)
        self.check(torch.ops.fuseprof.window_reverse_residual.default, w[:2], torch.randn(2, 9, 9, 16)[:, :7, :7],
                   7, 0, g, b, 1e-5)
        self.check(torch.ops.fuseprof.linear_residual.default, torch.randn(5, 24), torch.randn(16, 24),
                   torch.randn(16), torch.randn(5, 16))
        self.check(torch.ops.fuseprof.linear_gelu_tanh.default, torch.randn(5, 24), torch.randn(16, 24),
                   torch.randn(16))
        self.check(torch.ops.fuseprof.linear.default, torch.randn(5, 21), torch.randn(56, 24),
                   torch.randn(56), 49)
        g96, b96 = torch.randn(96), torch.randn(96)
        self.check(torch.ops.fuseprof.ln_mlp_residual.default, torch.randn(2, 5, 96), g96, b96, 1e-5,
                   torch.randn(384, 96), torch.randn(384), torch.randn(96, 384), torch.randn(96))
        self.check(torch.ops.fuseprof.window_reverse_add.default, w[:2], torch.randn(2, 9, 9, 16)[:, :7, :7], 7, 3)

    def test_gradients_match_finite_differences(self):
        """torch.autograd.gradcheck in float64 on small shapes: every input's gradient, from the
        registered backward pass, against finite differences of the operator (its CPU
        reference here, the definition the CUDA kernels are checked against)."""
        torch.manual_seed(0)
        d = dict(dtype=torch.float64, requires_grad=True)

        def check(op, *args):
            self.assertTrue(torch.autograd.gradcheck(op, args, eps=1e-6, atol=1e-5, rtol=1e-4), op)

        g, b = torch.randn(8, **d), torch.randn(8, **d)
        # A 9 x 9 map in windows of 3, padded to 12 in the second case (shift 1 rolls the padding).
        check(torch.ops.fuseprof.ln_shift_partition, torch.randn(2, 9, 9, 8, **d), g, b, 3, 1, 1e-5)
        check(torch.ops.fuseprof.ln_shift_partition, torch.randn(1, 10, 10, 8, **d), g, b, 4, 0, 1e-5)
        wins = torch.randn(2 * 9, 9, 8, **d)
        check(torch.ops.fuseprof.window_reverse_add, wins, torch.randn(2, 9, 9, 8, **d), 3, 1)
        check(torch.ops.fuseprof.window_reverse_residual, wins, torch.randn(2, 9, 9, 8, **d), 3, 1, g, b, 1e-5)
        # Window attention: 4 windows with 2 masks of a term (the bias, which requires grad too).
        heads, n, hd = 2, 9, 4
        term = torch.randn(2, heads, n, n, dtype=torch.float64)
        add = ops.padded_term(term).requires_grad_()
        check(torch.ops.fuseprof.window_attention, torch.randn(4 * n, 3 * heads * hd, **d), add, heads, n, 0.5)
        kpm = torch.zeros(3, 6, dtype=torch.float64)
        kpm[1, 4:] = -1e4
        check(torch.ops.fuseprof.attention, torch.randn(3 * 6, 3 * 2 * 4, **d), 2, 6, 0.5, kpm)
        check(torch.ops.fuseprof.attention, torch.randn(2 * 5, 3 * 2 * 4, **d), 2, 5, 0.5, None)
        x = torch.randn(2, 3, 6, **d)
        check(torch.ops.fuseprof.linear_residual, x, torch.randn(5, 6, **d), torch.randn(5, **d),
              torch.randn(2, 3, 5, **d))
        check(torch.ops.fuseprof.linear_gelu_tanh, x, torch.randn(5, 6, **d), torch.randn(5, **d))
        # A linear 7 -> 5 on weights padded to [8, 8]: the gradient reaches the padded weight.
        check(torch.ops.fuseprof.linear, torch.randn(4, 7, **d), torch.randn(8, 8, **d), torch.randn(8, **d), 5)
        c, hid = 6, 10
        check(torch.ops.fuseprof.ln_mlp_residual, torch.randn(2, 3, c, **d), torch.randn(c, **d),
              torch.randn(c, **d), 1e-5, torch.randn(hid, c, **d), torch.randn(hid, **d), torch.randn(c, hid, **d),
              torch.randn(c, **d))

    def test_gradients_are_the_original_modules(self):
        """A Swin block's window ops and attention, fused, against the same block in plain torch:
        the input's and every parameter's gradient in float32."""
        self.assert_block_gradients(*swin_block())

    def assert_block_gradients(self, params, plain, fused, tol=1e-5):
        grads = []
        for f in (plain, fused):
            out, normed = f()
            loss = (out * torch.linspace(-1, 1, out.shape[-1])).sum() + normed.square().sum()
            grads.append(torch.autograd.grad(loss, params))
        for name, a, b in zip(("x", "norm1.w", "norm1.b", "norm2.w", "norm2.b", "qkv.w", "qkv.b", "proj.w", "proj.b",
                               "bias table"), *grads):
            self.assertLess(fp.rel_err(b, a), tol, name)

    def test_backward_operators(self):
        """The backward kernels' operators (what the backward passes call where a kernel takes
        the call, on CUDA in 16 bits): their fake implementations agree with their references,
        the gradients through them match finite differences, and AOTAutograd (torch.compile's
        front end) traces them as opaque nodes of the backward graph."""
        torch.manual_seed(3)
        x, g = torch.randn(2, 9, 9, 8), torch.randn(8)
        win = torch.randn(2 * 9, 9, 8)
        for need in (True, False):
            self.check(torch.ops.fuseprof.ln_shift_partition_backward.default, win, x, g, 3, 1, 1e-5, need)
            self.check(torch.ops.fuseprof.window_reverse_backward.default, x, x.clone(), x.clone(), g, 3, 1, 1e-5,
                       need, need)
            self.check(torch.ops.fuseprof.window_reverse_backward.default, x, None, None, None, 3, 1, 0.0, need,
                       False)
            add = ops.attention_add(2, 9, torch.randn(2, 9, 9), torch.randn(2, 9, 9))
            self.check(torch.ops.fuseprof.window_attention_backward.default, torch.randn(4 * 9, 3 * 2 * 4), add,
                       torch.randn(4 * 9, 2 * 4), 2, 9, 0.5, need)
        with kernel_backward():
            d = dict(dtype=torch.float64, requires_grad=True)
            gamma, beta = torch.randn(8, **d), torch.randn(8, **d)
            wins = torch.randn(2 * 9, 9, 8, **d)
            for op, args in ((torch.ops.fuseprof.ln_shift_partition, (torch.randn(2, 9, 9, 8, **d), gamma, beta, 3,
                                                                      1, 1e-5)),
                             (torch.ops.fuseprof.window_reverse_add, (wins, torch.randn(2, 9, 9, 8, **d), 3, 1)),
                             (torch.ops.fuseprof.window_reverse_residual, (wins, torch.randn(2, 9, 9, 8, **d), 3, 1,
                                                                           gamma, beta, 1e-5)),
                             (torch.ops.fuseprof.window_attention, (
                                 torch.randn(4 * 9, 3 * 2 * 4, **d), ops.padded_term(
                                     torch.randn(2, 2, 9, 9, dtype=torch.float64)).requires_grad_(), 2, 9, 0.5))):
                self.assertTrue(torch.autograd.gradcheck(op, args, eps=1e-6, atol=1e-5, rtol=1e-4), op)
            ops.REFERENCE_CALLS.clear()
            params, plain, fused = swin_block()
            torch._dynamo.reset()
            self.assert_block_gradients(params, plain, torch.compile(fused, backend="aot_eager"))
            self.assertEqual({k: v for k, v in ops.REFERENCE_CALLS.items() if k.endswith("_backward")},
                             {"ln_shift_partition_backward": 1, "window_attention_backward": 1,
                              "window_reverse_backward": 1})

    def test_ln_mlp_reference_is_norm_then_timm_mlp_plus_residual(self):
        torch.manual_seed(2)
        mlp, norm = timm.layers.Mlp(96, 384).eval(), torch.nn.LayerNorm(96)
        with torch.no_grad():
            norm.weight.normal_()
            norm.bias.normal_()
        x = torch.randn(3, 7, 96)
        out = torch.ops.fuseprof.ln_mlp_residual(x, norm.weight, norm.bias, norm.eps, mlp.fc1.weight, mlp.fc1.bias,
                                                 mlp.fc2.weight, mlp.fc2.bias)
        with torch.no_grad():
            self.assertLess((out - (x + mlp(norm(x)))).abs().max().item(), 1e-5)
        self.assertTrue(fp._affine_layer_norm(norm, 96))
        self.assertFalse(fp._affine_layer_norm(torch.nn.LayerNorm(96, elementwise_affine=False), 96))
        self.assertTrue(fp._mlp_fusable(mlp, 96))
        self.assertFalse(fp._mlp_fusable(timm.layers.Mlp(768, 3072), 768))  # no build that wide
        self.assertFalse(fp._mlp_fusable(timm.layers.Mlp(96, 384, act_layer=lambda: torch.nn.GELU("tanh")), 96))
        self.assertFalse(fp._mlp_fusable(timm.layers.Mlp(96, 100), 96))  # hidden not a multiple of 64

    def test_window_ops_invert(self):
        x = torch.randn(2, 9, 9, 16)
        windows = ops.partition(x, 7)
        self.assertEqual(tuple(windows.shape), (2 * 4, 49, 16))
        self.assertTrue(torch.equal(ops.reverse(windows, 7, 2, 9, 9), x))

    def test_window_attention_matches_timm_semantics(self):
        """Window b takes mask b % nW; the combined add equals bias + mask."""
        torch.manual_seed(1)
        heads, n, nw, d = 2, 49, 4, 32
        qkv = torch.randn(2 * nw * n, 3 * heads * d)
        bias, mask = torch.randn(heads, n, n), torch.randn(nw, n, n)
        out = torch.ops.fuseprof.window_attention(qkv, ops.attention_add(heads, n, bias, mask), heads, n, 0.2)
        q, k, v = qkv.view(2 * nw, n, 3, heads, d).permute(2, 0, 3, 1, 4).unbind(0)
        s = (q @ k.transpose(-1, -2)) * 0.2 + bias[None] + mask.repeat(2, 1, 1)[:, None]
        ref = (s.softmax(-1) @ v).transpose(1, 2).reshape(-1, heads * d)
        self.assertLess((out - ref).abs().max().item(), 1e-5)


def swin_block():
    """(params, plain, fused): a Swin block's window ops and attention in plain torch and through
    the fuseprof operators; each function returns (the block's output, norm2 of it)."""
    torch.manual_seed(1)
    c, heads, ws, shift = 16, 2, 3, 1
    norm1, norm2 = torch.nn.LayerNorm(c), torch.nn.LayerNorm(c)
    qkv_lin, proj = torch.nn.Linear(c, 3 * c), torch.nn.Linear(c, c)
    table = torch.nn.Parameter(torch.randn(heads, ws * ws, ws * ws) * 0.1)
    x = torch.randn(2, 6, 6, c, requires_grad=True)
    params = [x, norm1.weight, norm1.bias, norm2.weight, norm2.bias, qkv_lin.weight, qkv_lin.bias, proj.weight,
              proj.bias, table]
    n, scale = ws * ws, (c // heads) ** -0.5

    def plain():
        y = torch.roll(norm1(x), (-shift, -shift), (1, 2))
        q, k, v = qkv_lin(ops.partition(y, ws)).reshape(-1, n, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
        a = ((q @ k.transpose(-1, -2)) * scale + table).softmax(-1) @ v
        a = proj(a.transpose(1, 2).reshape(-1, n, c))
        out = x + torch.roll(ops.reverse(a, ws, 2, 6, 6), (shift, shift), (1, 2))
        return out, norm2(out)

    def fused():
        wins = torch.ops.fuseprof.ln_shift_partition(x, norm1.weight, norm1.bias, ws, shift, norm1.eps)
        a = torch.ops.fuseprof.window_attention(qkv_lin(wins).reshape(-1, 3 * c), ops.padded_term(table[None]),
                                                heads, n, scale)
        a = proj(a).reshape(-1, n, c)
        return torch.ops.fuseprof.window_reverse_residual(a, x, ws, shift, norm2.weight, norm2.bias, norm2.eps)

    return params, plain, fused


class kernel_backward:
    """Within: the backward passes call the backward kernels' operators, as on CUDA in 16 bits
    (here their CPU references run)."""

    def __enter__(self):
        self.saved = ops._window_backward_kernels, ops._window_backward_kernel
        ops._window_backward_kernels = lambda x: True
        ops._window_backward_kernel = lambda *args: True

    def __exit__(self, *exc):
        ops._window_backward_kernels, ops._window_backward_kernel = self.saved


class Numerics(unittest.TestCase):
    def test_rel_err(self):
        a = torch.ones(10)
        self.assertEqual(fp.rel_err(a, a), 0.0)
        self.assertAlmostEqual(fp.rel_err(a * 1.01, a), 0.01, places=6)
        self.assertTrue(fp.passed(fp.rel_err(a * 1.005, a)))
        self.assertFalse(fp.passed(fp.rel_err(a * 1.02, a)))

    def test_nan_never_passes(self):
        a = torch.ones(10)
        b = a.clone()
        b[3] = float("nan")
        self.assertFalse(fp.passed(fp.rel_err(b, a)))
        self.assertFalse(fp.passed(fp.rel_err((a,), (a, a))))  # structures differ

    def test_tuples_compare_every_tensor(self):
        a, b = torch.ones(4), torch.ones(4)
        self.assertGreater(fp.rel_err((a, b * 2), (a, b)), 0.5)


class Swin(unittest.TestCase):
    def test_blocks_replaced_and_within_tolerance(self):
        reset()
        torch.manual_seed(0)
        model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False).eval()
        x = torch.randn(1, 3, 224, 224)
        with torch.inference_mode():
            y = model(x)
            second_call(lambda: model(x))
        rep = fp.report()
        blocks = {k: v for k, v in rep["modules"].items() if v["class"] == "SwinTransformerBlock"}
        self.assertEqual(len(blocks), 12, rep["modules"].keys())
        self.assertTrue(all(v["passed"] for v in blocks.values()), blocks)
        model_rep = rep["models"]["swin_tiny_patch4_window7_224"]
        self.assertTrue(model_rep["passed"], model_rep)
        self.assertFalse(model_rep["any_nan"])
        # The fused path runs once per block and call.
        for op in ("ln_shift_partition", "window_attention"):
            self.assertEqual(ops.REFERENCE_CALLS.get(op), 12, op)
        # The first two stages (C = 96, 192) run norm2 + the MLP in one kernel after the window
        # reverse; the wider ones the reverse with norm2, then fc1, GELU, fc2 + residual.
        self.assertEqual(ops.REFERENCE_CALLS.get("window_reverse_add"), 4)
        self.assertEqual(ops.REFERENCE_CALLS.get("ln_mlp_residual"), 4)
        self.assertEqual(ops.REFERENCE_CALLS.get("window_reverse_residual"), 8)
        self.assertEqual(ops.REFERENCE_CALLS.get("linear_residual"), 8)
        # Exact GELU stays exact unless gemm_gelu is asked for.
        self.assertNotIn("linear_gelu_tanh", ops.REFERENCE_CALLS)
        self.assertEqual(rep["approximations"], {})
        self.assertEqual(ops.REFERENCE_CALLS.get("linear"), 1)  # the patch embedding
        pe = [v for v in rep["modules"].values() if v["class"] == "PatchEmbed"]
        self.assertEqual(len(pe), 1)
        self.assertLess(pe[0]["rel_error"], 1e-5)  # fp32: the GEMM is the convolution
        self.assertEqual(tuple(y.shape), (1, 1000))

    def test_gemm_gelu_when_asked_is_listed_as_an_approximation(self):
        reset()
        fp.configure(apply=fp.DEFAULT_PATTERNS + ("gemm_gelu",))
        try:
            torch.manual_seed(0)
            model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=112).eval()
            x = torch.randn(1, 3, 112, 112)
            with torch.inference_mode():
                model(x)
                second_call(lambda: model(x))
        finally:
            fp.configure(apply=fp.DEFAULT_PATTERNS)
        rep = fp.report()
        # the fused MLP (exact) keeps the first two stages; the tanh epilogue takes the others
        self.assertEqual(ops.REFERENCE_CALLS.get("linear_gelu_tanh"), 8)
        self.assertEqual(ops.REFERENCE_CALLS.get("ln_mlp_residual"), 4)
        self.assertIn("SwinTransformer/layers.2.blocks.0",
                      rep["approximations"]["exact GELU computed in its tanh form (cuBLASLt GELU epilogue)"])
        self.assertTrue(all(v["passed"] for v in rep["modules"].values()), rep["modules"])
        self.assertTrue(rep["models"]["swin_tiny_patch4_window7_224"]["passed"])

    def test_training_goes_through_the_graph_matcher(self):
        """A timm model in training mode: the class patches take inference calls only, the
        graph matcher takes the training call; its first call is checked as a whole and each
        replaced site on its output and gradients, and the model trains."""
        reset()
        torch._dynamo.reset()
        model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=56, depths=(2,),
                                  num_heads=(3,), embed_dim=96, drop_path_rate=0.0)
        model.train()
        model(torch.randn(2, 3, 56, 56)).sum().backward()
        rep = fp.report()
        self.assertIn("training mode: the class patches take inference calls; the graph matcher takes this one",
                      rep["left_alone"])
        whole = rep["models"]["swin_tiny_patch4_window7_224"]
        self.assertTrue(whole["training"] and whole["passed"] and whole["graph_rewrites"] >= 8, whole)
        self.assertTrue(all(m["passed"] and "grad_rel_error" in m for m in rep["modules"].values()), rep["modules"])
        self.assertIsNotNone(model.layers[0].blocks[0].attn.relative_position_bias_table.grad)
        self.assertGreater(ops.REFERENCE_CALLS.get("window_attention", 0), 0)

    def test_without_window_attention_pattern(self):
        reset()
        fp.configure(apply=[p for p in fp.DEFAULT_PATTERNS if p != "window_attention"])
        try:
            model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=112).eval()
            x = torch.randn(1, 3, 112, 112)
            with torch.inference_mode():
                model(x)
                second_call(lambda: model(x))
        finally:
            fp.configure(apply=fp.DEFAULT_PATTERNS)
        self.assertNotIn("window_attention", ops.REFERENCE_CALLS)
        self.assertEqual(ops.REFERENCE_CALLS["ln_shift_partition"], 12)
        self.assertTrue(all(v["passed"] for v in fp.report()["modules"].values()))


class ViT(unittest.TestCase):
    def test_blocks_replaced(self):
        reset()
        torch.manual_seed(0)
        model = timm.create_model("vit_tiny_patch16_224", pretrained=False).eval()
        x = torch.randn(2, 3, 224, 224)
        with torch.inference_mode():
            model(x)
            second_call(lambda: model(x))
        rep = fp.report()
        blocks = [v for v in rep["modules"].values() if v["class"] == "Block"]
        self.assertEqual(len(blocks), 12)
        self.assertTrue(all(v["passed"] for v in blocks))
        self.assertEqual(ops.REFERENCE_CALLS["attention"], 12)
        self.assertEqual(ops.REFERENCE_CALLS["linear_residual"], 24)
        self.assertEqual(ops.REFERENCE_CALLS["linear"], 1)  # the patch embedding, flattened to tokens
        self.assertTrue(rep["models"]["vit_tiny_patch16_224"]["passed"])

    def test_unsupported_head_dim_is_reported(self):
        reset()
        model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_heads=6).eval()  # head_dim 32
        model2 = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_heads=2).eval()  # head_dim 96
        with torch.inference_mode():
            model(torch.randn(1, 3, 224, 224))
            model2(torch.randn(1, 3, 224, 224))
        why = [k for k in fp.report()["left_alone"] if k.startswith("head_dim 96")]
        self.assertEqual(len(why), 1, fp.report()["left_alone"])


class Bert(unittest.TestCase):
    def model(self):
        cfg = transformers.BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=512, vocab_size=1000)
        torch.manual_seed(0)
        return transformers.AutoModel.from_config(cfg, attn_implementation="sdpa").eval()

    def test_layers_replaced_with_padding_mask(self):
        reset()
        model = self.model()
        ids = torch.randint(0, 1000, (3, 16))
        mask = torch.ones(3, 16, dtype=torch.long)
        mask[1, 10:] = 0
        mask[2, 5:] = 0
        with torch.inference_mode():
            out = model(input_ids=ids, attention_mask=mask).last_hidden_state
            second_call(lambda: model(input_ids=ids, attention_mask=mask))
        rep = fp.report()
        classes = sorted(v["class"] for v in rep["modules"].values())
        self.assertEqual(classes.count("BertIntermediate"), 0, classes)  # exact GELU: only with gemm_gelu
        self.assertEqual(classes.count("BertOutput"), 2)
        self.assertEqual(classes.count("BertSelfOutput"), 2)
        attn = [k for k, v in rep["modules"].items() if "attention.self" in k]
        self.assertEqual(len(attn), 2, rep["modules"].keys())
        self.assertTrue(all(v["passed"] for v in rep["modules"].values()), rep["modules"])
        self.assertEqual(ops.REFERENCE_CALLS["attention"], 2)
        whole = rep["models"]["BertModel"]
        self.assertTrue(whole["passed"], whole)
        # The padding mattered: rows of the padded sequences differ from an unpadded run.
        with torch.inference_mode():
            unmasked = model(input_ids=ids).last_hidden_state
        self.assertGreater((out[2] - unmasked[2]).abs().max().item(), 1e-3)

    def test_key_padding_mask_converted_once_per_forward(self):
        mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
        mask[0, ..., 3:] = False
        try:
            fp._forward_token = object()
            a = fp._key_padding(mask, 2, 5, torch.float32)
            self.assertIs(fp._key_padding(mask, 2, 5, torch.float32), a)  # the next layer reuses it
            self.assertTrue(torch.equal(a[0, 3:], torch.full((2,), torch.finfo(torch.float32).min)))
            self.assertTrue(torch.equal(a[0, :3], torch.zeros(3)) and torch.equal(a[1], torch.zeros(5)))
            self.assertIsNot(fp._key_padding(mask, 2, 5, torch.float16), a)  # per dtype
            fp._forward_token = object()  # the next forward converts again
            mask[1, ..., 4] = False
            b = fp._key_padding(mask, 2, 5, torch.float32)
            self.assertIsNot(b, a)
            self.assertEqual(b[1, 4].item(), torch.finfo(torch.float32).min)
            fp._forward_token = None  # outside a wrapped model's forward: never kept
            self.assertIsNot(fp._key_padding(mask, 2, 5, torch.float32), fp._key_padding(mask, 2, 5, torch.float32))
        finally:
            fp._forward_token = None

    def test_intermediate_with_gemm_gelu(self):
        reset()
        model = self.model()
        fp.configure(apply=fp.DEFAULT_PATTERNS + ("gemm_gelu",))
        try:
            ids = torch.randint(0, 1000, (2, 8))
            with torch.inference_mode():
                model(input_ids=ids)
                second_call(lambda: model(input_ids=ids))
        finally:
            fp.configure(apply=fp.DEFAULT_PATTERNS)
        rep = fp.report()
        inter = [v for v in rep["modules"].values() if v["class"] == "BertIntermediate"]
        self.assertEqual(len(inter), 2, rep["modules"].keys())
        self.assertTrue(all(v["passed"] for v in inter), inter)
        self.assertEqual(ops.REFERENCE_CALLS["linear_gelu_tanh"], 2)
        self.assertEqual(rep["patched"]["gemm_gelu"], ["transformers.models.bert.modeling_bert.BertIntermediate"])

    def test_concatenated_qkv_weight_made_once(self):
        reset()
        model = self.model()
        ids = torch.randint(0, 1000, (2, 8))
        with torch.inference_mode():
            model(input_ids=ids)
            attn = model.encoder.layer[0].attention.self
            first = attn._fuseprof_qkv_w
            model(input_ids=ids)
        self.assertIs(attn._fuseprof_qkv_w, first)
        self.assertEqual(tuple(first.shape), (3 * 128, 128))
        self.assertNotIn("_fuseprof_qkv_w", model.state_dict())


class SdpaWindow(unittest.TestCase):
    """F.scaled_dot_product_attention on short sequences with an additive [M, heads, N, N] term
    goes to the window fMHA, whoever calls it."""

    def test_calls_with_an_additive_term_match_sdpa(self):
        reset()
        torch.manual_seed(1)
        q, k, v = (torch.randn(8, 2, 49, 32, dtype=torch.float64) for _ in range(3))
        for mask in (torch.randn(8, 2, 49, 49, dtype=torch.float64),
                     torch.randn(1, 2, 49, 49, dtype=torch.float64),
                     torch.randn(8, 1, 49, 49, dtype=torch.float64)):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            ref = F.scaled_dot_product_attention.__wrapped__(q, k, v, attn_mask=mask)
            # The CPU reference computes in float32.
            self.assertLess(fp.rel_err(out, ref), 1e-5, mask.shape)
        rep = fp.report()
        self.assertEqual(len(rep["modules"]), 3, rep["modules"].keys())
        self.assertTrue(all(m["passed"] for m in rep["modules"].values()))
        self.assertEqual(ops.REFERENCE_CALLS["window_attention"], 3)  # each checked on its first call
        # Dropout (said why), a boolean mask and long sequences are left to SDPA.
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.5)
        F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(8, 2, 49, 49, dtype=torch.bool))
        long = torch.randn(2, 2, 100, 32, dtype=torch.float64)
        F.scaled_dot_product_attention(long, long, long, attn_mask=torch.randn(1, 2, 100, 100, dtype=torch.float64))
        self.assertEqual(ops.REFERENCE_CALLS["window_attention"], 3)
        self.assertTrue(any("dropout" in why for why in rep["left_alone"]), rep["left_alone"])

    def test_hugging_face_swin_attention_is_replaced(self):
        reset()
        cfg = transformers.SwinConfig(image_size=56, patch_size=4, embed_dim=64, depths=[2, 2],
                                      num_heads=[2, 4], window_size=7, num_labels=10)
        torch.manual_seed(0)
        model = transformers.SwinForImageClassification(cfg).eval()
        with torch.inference_mode():
            model(pixel_values=torch.randn(2, 3, 56, 56))
        rep = fp.report()
        sdpa = {k: v for k, v in rep["modules"].items() if v["class"] == "scaled_dot_product_attention"}
        # Unshifted blocks add the bias [1, heads, 49, 49]; shifted ones bias + mask per window.
        self.assertEqual(len(sdpa), 3, sdpa.keys())
        self.assertTrue(all(v["passed"] for v in sdpa.values()), sdpa)
        self.assertGreater(ops.REFERENCE_CALLS["window_attention"], 0)
        whole = rep["models"]["SwinForImageClassification"]
        self.assertTrue(whole["passed"], whole)


class OddLinear(unittest.TestCase):
    def test_padded_weight_and_output(self):
        reset()
        torch.manual_seed(0)
        lin = torch.nn.Linear(50, 49).eval()
        x = torch.randn(7, 50)
        with torch.inference_mode():
            y = lin(x)
            second_call(lambda: lin(x))
        self.assertEqual(tuple(lin._fuseprof_wpad.shape), (56, 56))
        self.assertTrue(torch.equal(lin._fuseprof_wpad[49:], torch.zeros(7, 56)))
        self.assertTrue(torch.equal(lin._fuseprof_wpad[:, 50:], torch.zeros(56, 6)))
        self.assertEqual(tuple(y.shape), (7, 49))
        self.assertLess((y - F.linear(x, lin.weight, lin.bias)).abs().max().item(), 1e-5)
        self.assertEqual(ops.REFERENCE_CALLS["linear"], 1)

    def test_aligned_linear_untouched(self):
        reset()
        lin = torch.nn.Linear(64, 32).eval()
        with torch.inference_mode():
            lin(torch.randn(3, 64))
        self.assertEqual(ops.REFERENCE_CALLS, {})
        self.assertFalse(hasattr(lin, "_fuseprof_wpad"))

    def test_weight_change_repads(self):
        reset()
        lin = torch.nn.Linear(12, 10).eval()
        with torch.inference_mode():
            lin(torch.randn(2, 12))
        with torch.no_grad():
            lin.weight.copy_(torch.randn(10, 12))
            lin.weight.data = lin.weight.data.clone()
        with torch.inference_mode():
            y = lin(torch.randn(2, 12) * 0 + 1)
        self.assertLess((y - F.linear(torch.ones(2, 12), lin.weight, lin.bias)).abs().max().item(), 1e-5)


class ImportHook(unittest.TestCase):
    def test_sitecustomize_patches_on_import(self):
        """The hook patches timm and transformers when the program imports them."""
        import subprocess
        import sys

        code = ("import timm, transformers\n"
                "from transformers.models.bert import modeling_bert as mb\n"
                "from timm.models import swin_transformer as st\n"
                "print(st.SwinTransformerBlock._fuseprof_patched, mb.BertSelfAttention._fuseprof_patched)\n")
        here = os.path.dirname(os.path.abspath(fp.__file__))
        env = dict(os.environ, FUSEPROF_PATCH="1", PYTHONPATH=here, FUSEPROF_PATCH_CPP="0")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("fuseprof:", r.stderr)
        self.assertEqual(r.stdout.strip(), "True True")


# ---- the graph matcher: the same computations in each implementation -------------------------

import collections  # noqa: E402

import torchvision  # noqa: E402
import fuseprof_graph as fg  # noqa: E402


# The modules whose functions the graph matcher puts in a graph.
REPLACEMENTS = ("fuseprof_graph", "fuseprof_patch_ops")


def graph_matches(model, *args, apply=fp.PATTERNS, eager=False):
    """Captures model(*args) with TorchDynamo (the class patches off, so that the graph holds
    each library's own code), runs the graph matcher on it with every pattern, and returns
    (the replacement functions called from the graph and how often, the output's error against
    the unpatched model, what was left alone)."""
    reset()
    torch._dynamo.reset()
    found = collections.Counter()

    def backend(gm, example_inputs):
        fg.rewrite(gm, "model", set(apply), eager=eager)
        for node in gm.graph.nodes:
            if node.op == "call_function" and getattr(node.target, "__module__", "") in REPLACEMENTS:
                found[node.target.__name__] += 1
        return gm.forward

    fp.configure(enabled=False)
    try:
        with torch.inference_mode():
            ref = model(*args)
            out = torch.compile(model, backend=backend, dynamic=False)(*args)
    finally:
        fp.configure(enabled=True)
    return found, fp.rel_err(out, ref), dict(fp.report()["left_alone"])


def graph_trains(model, *args, apply=fp.PATTERNS):
    """As graph_matches, in training mode with autograd recording: (the replacement functions
    called from the graph and how often, the output's error and the error of the gradients of
    every parameter and floating input against the unpatched model, for the same output
    gradient)."""
    reset()
    torch._dynamo.reset()
    found = collections.Counter()

    def backend(gm, example_inputs):
        fg.rewrite(gm, "model", set(apply), eager=True)
        for node in gm.graph.nodes:
            if node.op == "call_function" and getattr(node.target, "__module__", "") in REPLACEMENTS:
                found[node.target.__name__] += 1
        return gm.forward

    model.train()
    args = [a.clone().requires_grad_() if torch.is_tensor(a) and a.is_floating_point() else a for a in args]
    wrt = list(model.parameters()) + [a for a in args if torch.is_tensor(a) and a.requires_grad]

    def run(fn):
        torch.manual_seed(0)
        out = fn(*args)
        out = out if torch.is_tensor(out) else out[0]
        cot = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
        return out.detach(), torch.autograd.grad(out, wrt, cot, allow_unused=True)

    fp.configure(enabled=False)
    try:
        ref, ref_grads = run(model)
        out, grads = run(torch.compile(model, backend=backend, dynamic=False))
    finally:
        fp.configure(enabled=True)
    pairs = [(g, r) for g, r in zip(grads, ref_grads) if r is not None]
    return found, fp.rel_err(out, ref), fp.rel_err(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))


class HandBlock(torch.nn.Module):
    """A pre-norm transformer block as someone writes it by hand: separate q/k/v projections,
    SDPA with a key-padding mask, an MLP of plain Linear/GELU."""

    def __init__(self, c=96, heads=3):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(c), torch.nn.LayerNorm(c)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(c, c) for _ in range(4))
        self.up, self.down = torch.nn.Linear(c, 4 * c), torch.nn.Linear(4 * c, c)

    def forward(self, x, keep):
        b, n, c = x.shape
        h = self.ln1(x)
        q, k, v = (p(h).view(b, n, self.heads, -1).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        x = x + self.o(a.transpose(1, 2).reshape(b, n, c))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class HandWindowAttention(torch.nn.Module):
    """Window attention written out by hand: a learned [heads, N, N] bias and a fixed mask per
    window, added to the scores before the softmax."""

    def __init__(self, c=64, heads=2, n=16, windows=4):
        super().__init__()
        self.heads, self.scale = heads, (c // heads) ** -0.5
        self.qkv, self.proj = torch.nn.Linear(c, 3 * c), torch.nn.Linear(c, c)
        self.bias = torch.nn.Parameter(torch.randn(heads, n, n))
        self.register_buffer("mask", torch.where(torch.rand(windows, n, n) > 0.3, 0.0, -100.0))

    def forward(self, x):
        bw, n, c = x.shape
        q, k, v = self.qkv(x).reshape(bw, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attn = (q * self.scale) @ k.transpose(-2, -1) + self.bias
        windows = self.mask.shape[0]
        attn = attn.view(bw // windows, windows, self.heads, n, n) + self.mask[None, :, None]
        attn = attn.view(bw, self.heads, n, n).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(bw, n, c))


class HandPatchify(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 96, 4, 4)

    def forward(self, x):
        return self.conv(x).flatten(2).transpose(1, 2)


class HandMha(torch.nn.Module):
    """nn.MultiheadAttention used for self-attention with a key-padding mask, plus a residual."""

    def __init__(self):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(64, 2, batch_first=True)

    def forward(self, x, pad):
        return x + self.attn(x, x, x, key_padding_mask=pad, need_weights=False)[0]


def _bert_inputs():
    ids = torch.randint(0, 100, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 12:] = 0
    return ids, mask


class GraphMatcher(unittest.TestCase):
    """Each computation is found in the captured graph of each implementation that writes it,
    whatever its classes, and the rewritten graph computes what the model computes."""

    def check(self, model, args, expect, left_alone=None):
        torch.manual_seed(0)
        found, err, alone = graph_matches(model.eval(), *args)
        self.assertEqual(dict(found), expect, alone)
        self.assertLess(err, 1e-5)
        if left_alone is not None:
            self.assertEqual(alone, left_alone)
        rep = fp.report()
        self.assertTrue(rep["modules"] and all(m["passed"] for m in rep["modules"].values()), rep["modules"])

    def test_timm(self):
        torch.manual_seed(0)
        swin = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=56, depths=(2,),
                                 num_heads=(3,), embed_dim=96)
        # Written-out window attention (bias, then bias + shifted-window mask), LayerNorm + shift +
        # partition, reverse + shift + residual, MLP, patch embed.
        self.check(swin, (torch.randn(2, 3, 56, 56),),
                   {"attention_chain": 2, "window_partition": 2, "window_reverse": 2, "ln_mlp_residual": 2,
                    "patch_embed": 1}, {})
        # A map that is not a multiple of the window (15 x 15 tokens, window 7): timm shifts, then
        # pads, as the kernel does.
        torch.manual_seed(0)
        padded = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=60, depths=(2,),
                                   num_heads=(3,), embed_dim=96, strict_img_size=False)
        self.check(padded, (torch.randn(2, 3, 60, 60),),
                   {"attention_chain": 2, "window_partition": 2, "window_reverse": 2, "ln_mlp_residual": 2,
                    "patch_embed": 1})
        vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, depth=2)
        self.check(vit, (torch.randn(2, 3, 32, 32),),
                   {"sdpa_full": 2, "linear_residual": 2, "ln_mlp_residual": 2, "patch_embed": 1}, {})

    def test_torchvision(self):
        swin = torchvision.models.swin_transformer.SwinTransformer(patch_size=[4, 4], embed_dim=96, depths=[2],
                                                                   num_heads=[3], window_size=[7, 7])
        self.check(swin, (torch.randn(2, 3, 56, 56),),
                   {"attention_chain": 2, "window_partition": 2, "window_reverse": 2, "ln_mlp_residual": 2,
                    "patch_embed": 1}, {})
        # A width the fused MLP is not built for: the window reverse takes the next LayerNorm.
        narrow = torchvision.models.swin_transformer.SwinTransformer(patch_size=[4, 4], embed_dim=64, depths=[2],
                                                                     num_heads=[2], window_size=[7, 7])
        self.check(narrow, (torch.randn(2, 3, 56, 56),),
                   {"attention_chain": 2, "window_partition": 2, "window_reverse": 2, "linear_residual": 2,
                    "patch_embed": 1})
        # torchvision pads, then shifts: where the map is padded, the shifted block is left alone
        # with the reason (the unshifted one is taken).
        padded = torchvision.models.swin_transformer.SwinTransformer(patch_size=[4, 4], embed_dim=96, depths=[2],
                                                                     num_heads=[3], window_size=[7, 7])
        found, err, alone = graph_matches(padded.eval(), torch.randn(2, 3, 60, 60))
        self.assertEqual((found["window_partition"], found["window_reverse"]), (1, 1), alone)
        self.assertLess(err, 1e-5)
        self.assertTrue(any("padded before the shift" in why for why in alone), alone)
        self.assertTrue(any("shifted before the padding is cropped" in why for why in alone), alone)
        vit = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                                   hidden_dim=64, mlp_dim=256)
        self.check(vit, (torch.randn(2, 3, 32, 32),), {"mha_self": 2, "linear_residual": 2, "patch_embed": 1}, {})

    def test_hugging_face(self):
        bert = transformers.BertModel(transformers.BertConfig(hidden_size=64, num_hidden_layers=2,
                                                              num_attention_heads=2, intermediate_size=256))
        # The padding mask as transformers builds it ([B, 1, S, S], broadcast from [B, S]): its
        # [B, S] row made once for both layers; query, key and value projected by one GEMM.
        self.check(bert, _bert_inputs(),
                   {"sdpa_full": 2, "key_padding_row": 1, "qkv_linear": 2, "linear_residual": 4}, {})
        vit = transformers.ViTModel(transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=64,
                                                           num_hidden_layers=2, num_attention_heads=2,
                                                           intermediate_size=256))
        self.check(vit, (torch.randn(2, 3, 32, 32),),
                   {"sdpa_full": 2, "qkv_linear": 2, "linear_residual": 4, "patch_embed": 1}, {})
        swin = transformers.SwinModel(transformers.SwinConfig(image_size=56, patch_size=4, embed_dim=96, depths=[2],
                                                              num_heads=[3], window_size=7))
        self.check(swin, (torch.randn(2, 3, 56, 56),),
                   {"sdpa_window": 2, "qkv_linear": 2, "window_partition": 2, "window_reverse": 2,
                    "ln_mlp_residual": 2, "patch_embed": 1}, {})

    def test_by_hand(self):
        keep = torch.ones(2, 10, dtype=torch.bool)
        keep[0, 7:] = False
        self.check(HandBlock(), (torch.randn(2, 10, 96), keep),
                   {"sdpa_full": 1, "key_padding_row": 1, "qkv_linear": 1, "linear_residual": 1,
                    "ln_mlp_residual": 1})
        self.check(HandWindowAttention(), (torch.randn(8, 16, 64),), {"attention_chain": 1})
        self.check(HandPatchify(), (torch.randn(2, 3, 16, 16),), {"patch_embed": 1})
        pad = torch.zeros(2, 12, dtype=torch.bool)
        pad[1, 9:] = True
        self.check(HandMha(), (torch.randn(2, 12, 64), pad), {"mha_self": 1})

    def test_what_is_not_the_computation_is_left(self):
        class Causal(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(64, 64)

            def forward(self, x):
                q = self.lin(x).view(2, 8, 2, 32).transpose(1, 2)
                a = F.scaled_dot_product_attention(q, q, q, is_causal=True)
                # The linear's output is used twice: not a residual epilogue.
                y = self.lin(x)
                return a.sum() + y + y

        found, _, alone = graph_matches(Causal().eval(), torch.randn(2, 8, 64))
        self.assertEqual(dict(found), {})
        self.assertTrue(any("causal" in why for why in alone), alone)

    def test_a_key_padding_mask_is_told_from_a_full_mask(self):
        class Masked(torch.nn.Module):
            def forward(self, q, mask):
                return F.scaled_dot_product_attention(q, q, q, attn_mask=mask)

        q = torch.randn(2, 2, 80, 32)
        found, _, alone = graph_matches(Masked().eval(), q, torch.randn(2, 1, 80, 80))
        self.assertEqual(dict(found), {})
        self.assertTrue(any("neither key padding" in why for why in alone), alone)
        found, err, _ = graph_matches(Masked().eval(), q, torch.randn(2, 1, 1, 80).expand(2, 1, 80, 80))
        # q, k, v from nowhere in particular: packed for the kernel by one copy.
        self.assertEqual(dict(found), {"sdpa_full": 1, "key_padding_row": 1, "pack_qkv": 1})
        self.assertLess(err, 1e-5)

    def test_eager_puts_back_the_fast_path_the_capture_drops(self):
        """nn.MultiheadAttention's eager forward takes one native op in inference; TorchDynamo
        captures its Python path instead. Where the fMHA does not take the call and the graph
        runs as it is, the native op goes back in."""
        pad = torch.zeros(2, 12, dtype=torch.bool)
        pad[1, 9:] = True
        no_fmha = [p for p in fp.PATTERNS if p != "full_attention"]
        found, err, _ = graph_matches(HandMha().eval(), torch.randn(2, 12, 64), pad, apply=no_fmha, eager=True)
        self.assertEqual(dict(found), {"mha_native": 1})
        self.assertLess(err, 1e-5)
        found, _, _ = graph_matches(HandMha().eval(), torch.randn(2, 12, 64), pad, apply=no_fmha)
        self.assertEqual(dict(found), {})  # compiled: Inductor takes the captured path on both sides

    def test_compiled_modes_hand_the_rewritten_graph_to_the_compiler(self):
        """Under torch.compile's modes the backend rewrites the captured graph, then hands it to
        Inductor, whose front end (AOTAutograd: functionalization, fake tensors) traces the
        replacements as opaque operators. Here AOTAutograd's eager back end stands in for
        Inductor's C++ code generation, which needs a compiler toolchain."""
        reset()
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = HandBlock().eval()
        model.__dict__["_fuseprof_seen"] = True  # compiled here, not wrapped at its first call
        args = (torch.randn(2, 10, 96), torch.ones(2, 10, dtype=torch.bool))
        fp.configure(enabled=False)
        try:
            with torch.inference_mode():
                ref = model(*args)
        finally:
            fp.configure(enabled=True)
        backend = fg.Backend("HandBlock", "default")
        self.assertIsInstance(backend.inductor, torch._TorchCompileInductorWrapper)
        handed = []
        aot = torch._dynamo.lookup_backend("aot_eager")

        def compiler(gm, example_inputs):
            handed.append(sorted({n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"
                                  and getattr(n.target, "__module__", "") in REPLACEMENTS}))
            return aot(gm, example_inputs)

        backend.inductor = compiler
        with torch.inference_mode():
            out = torch.compile(model, backend=backend)(*args)
        self.assertTrue(handed)
        self.assertEqual(handed[0], ["key_padding_row", "linear_residual", "ln_mlp_residual", "qkv_linear",
                                     "sdpa_full"])
        self.assertLess(fp.rel_err(out, ref), 1e-5)

    def test_training_runs_the_rewritten_graph_with_the_models_gradients(self):
        """In training mode with autograd recording, the same computations are replaced (the MLP
        keeps its GEMMs: its fused backward would recompute fc1; attention the model computes
        through PyTorch's fused SDPA without a windowed term keeps it, with its own backward), and
        the output and every parameter's and input's gradient are the unpatched model's."""
        cases = [
            (timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=56, depths=(2,),
                               num_heads=(3,), embed_dim=96, drop_path_rate=0.0), (torch.randn(2, 3, 56, 56),),
             {"attention_chain": 2, "window_partition": 2, "window_reverse": 2, "linear_residual": 2,
              "patch_embed": 1}),
            (torchvision.models.swin_transformer.SwinTransformer(patch_size=[4, 4], embed_dim=96, depths=[2],
                                                                 num_heads=[3], window_size=[7, 7],
                                                                 stochastic_depth_prob=0.0),
             (torch.randn(2, 3, 56, 56),),
             {"attention_chain": 2, "window_partition": 2, "window_reverse": 2, "linear_residual": 2,
              "patch_embed": 1}),
            (transformers.SwinModel(transformers.SwinConfig(image_size=56, patch_size=4, embed_dim=96, depths=[2],
                                                            num_heads=[3], window_size=7, hidden_dropout_prob=0.0,
                                                            attention_probs_dropout_prob=0.0, drop_path_rate=0.0)),
             (torch.randn(2, 3, 56, 56),),
             {"sdpa_window": 2, "qkv_linear": 2, "window_partition": 2, "window_reverse": 2, "linear_residual": 2,
              "patch_embed": 1}),
            (transformers.BertModel(transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                                            intermediate_size=256, hidden_dropout_prob=0.0,
                                                            attention_probs_dropout_prob=0.0)),
             _bert_inputs(), {"linear_residual": 4}),
        ]
        for model, args, expect in cases:
            torch.manual_seed(0)
            found, err, grad_err = graph_trains(model, *args)
            name = type(model).__name__
            self.assertEqual(dict(found), expect, name)
            self.assertLess(err, 1e-5, name)
            self.assertLess(grad_err, 1e-5, name)
            self.assertIn("model", fp.report()["left_alone"].get(
                "fused_mlp while training: its backward would recompute fc1 and GELU; the MLP keeps its GEMMs",
                ["model"]))
            sites = fp.report()["modules"]
            self.assertTrue(sites and all(m["passed"] and "grad_rel_error" in m for m in sites.values()), sites)
            if name == "BertModel":
                self.assertTrue(any("fused attention and its own backward are kept" in why
                                    for why in fp.report()["left_alone"]), fp.report()["left_alone"])

    def test_autocast_weights_are_read_in_the_activations_dtype(self):
        """Under autocast a model's parameters stay float32 while its activations are bf16: the
        replacements take the weights in the activations' dtype, and the float32 parameters get
        float32 gradients through the cast."""
        import fuseprof_graph

        reset()
        torch.manual_seed(0)
        h, r = torch.randn(4, 16, dtype=torch.bfloat16), torch.randn(4, 8, dtype=torch.bfloat16)
        w, b = torch.randn(8, 16, requires_grad=True), torch.randn(8, requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # the site's first-call check runs the original
            out = fuseprof_graph.linear_residual("site", h, w, b, r)
        self.assertEqual(out.dtype, torch.bfloat16)
        torch.testing.assert_close(out, r + F.linear(h, w.bfloat16(), b.bfloat16()))
        out.float().sum().backward()
        self.assertEqual((w.grad.dtype, b.grad.dtype), (torch.float32, torch.float32))
        x = torch.randn(2, 14, 14, 8, dtype=torch.bfloat16)
        g, beta = torch.rand(8, requires_grad=True), torch.randn(8, requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = fuseprof_graph.window_partition("site2", 7, 3, 1e-5, (2, 14, 14, 8), (8, 49, 8), x, g, beta)
        torch.testing.assert_close(y, ops.ref_ln_shift_partition(x, g.bfloat16(), beta.bfloat16(), 7, 3, 1e-5))
        y.float().sum().backward()
        self.assertEqual(g.grad.dtype, torch.float32)

    def test_active_dropout_keeps_its_chain(self):
        """Dropout that drops (training, p > 0) between a chain's ops is not an identity: that
        chain stays as written, and training still matches the model."""
        bert = transformers.BertModel(transformers.BertConfig(hidden_size=64, num_hidden_layers=1,
                                                              num_attention_heads=2, intermediate_size=256))
        found, err, grad_err = graph_trains(bert, *_bert_inputs())
        self.assertNotIn("linear_residual", found)  # BERT's output dropout sits between the linear and the add
        self.assertLess(max(err, grad_err), 1e-5)


class StandInInductor:
    """Inductor's place in the graph matcher's backend (Inductor's C++ code generation needs a
    compiler toolchain): AOTAutograd's eager back end, drawing a random number of its own on each
    call as a compiler's random stream differs from eager mode's."""

    def __init__(self, mode, options, dynamic):
        self.mode = mode

    def __call__(self, gm, example_inputs):
        compiled = torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)

        def run(*args):
            torch.rand(1)  # a compiler's own random stream: other drop-path masks
            return compiled(*args)
        return run


class AnyModel(unittest.TestCase):
    """A model the program builds itself (no timm, no transformers) is wrapped at its first
    outermost call: checked as a whole, its graph rewritten, and run unpatched when nothing in
    it was replaced."""

    def test_training_under_cuda_graphs_runs_the_models_own_forward(self):
        """A model in training mode, wrapped where CUDA graphs are asked for, still trains: its
        own forward runs, and the report says why."""
        reset()
        os.environ["FUSEPROF_CUDA_GRAPHS"] = "1"
        try:
            model = fp.wrap_model(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).train(), "net")
        finally:
            del os.environ["FUSEPROF_CUDA_GRAPHS"]
        model(torch.randn(4, 8)).sum().backward()
        self.assertIsNotNone(model[0].weight.grad)
        self.assertTrue(any("cannot train" in why for why in fp.report()["left_alone"]), fp.report()["left_alone"])

    def test_compiled_training_is_checked_on_the_references_random_numbers(self):
        """Compiled training with drop-path: the compiler draws its own random numbers (here a
        stand-in for Inductor that moves the random stream), so the first call checks the
        rewritten graph run eagerly on the reference's masks; the compiled graph trains."""
        import fuseprof_graph

        reset()
        torch._dynamo.reset()
        torch.manual_seed(0)
        saved = fuseprof_graph.torch._TorchCompileInductorWrapper
        fuseprof_graph.torch._TorchCompileInductorWrapper = StandInInductor
        os.environ["FUSEPROF_COMPILE"] = "default"
        try:
            model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=56, depths=(2,),
                                      num_heads=(3,), embed_dim=96, drop_path_rate=0.5).train()
            model(torch.randn(2, 3, 56, 56)).sum().backward()
        finally:
            del os.environ["FUSEPROF_COMPILE"]
            fuseprof_graph.torch._TorchCompileInductorWrapper = saved
            torch._dynamo.reset()
        whole = fp.report()["models"]["swin_tiny_patch4_window7_224"]
        self.assertTrue(whole["training"] and whole["passed"] and whole["graph_rewrites"] >= 7, whole)
        self.assertTrue(all(m["passed"] and "grad_rel_error" in m for m in fp.report()["modules"].values()))
        self.assertIsNotNone(model.layers[0].blocks[0].attn.relative_position_bias_table.grad)

    def test_a_model_the_program_compiles_itself(self):
        """The program calls torch.compile on its model (inference, training with drop-path,
        nn.Module.compile): the graph matcher becomes the compiler's backend, the first call is
        checked eagerly before the compiled one, and the model runs and trains; another backend
        is left as the program asked."""
        import fuseprof_graph

        saved = fuseprof_graph.torch._TorchCompileInductorWrapper
        fuseprof_graph.torch._TorchCompileInductorWrapper = StandInInductor
        self.addCleanup(setattr, fuseprof_graph.torch, "_TorchCompileInductorWrapper", saved)
        self.addCleanup(torch._dynamo.reset)
        x = torch.randn(2, 3, 56, 56)

        def swin(drop_path=0.0):
            torch.manual_seed(0)
            return timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=56, depths=(2,),
                                     num_heads=(3,), embed_dim=96, num_classes=10, drop_path_rate=drop_path)

        reset()
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = torchvision.models.swin_transformer.SwinTransformer(
            patch_size=[4, 4], embed_dim=96, depths=[2], num_heads=[3], window_size=[7, 7], num_classes=10).eval()
        fp.configure(enabled=False)
        try:
            with torch.no_grad():
                ref = model(x)
        finally:
            fp.configure(enabled=True)
        compiled = torch.compile(model)  # before any call: wrapped here
        with torch.no_grad():
            out, again = compiled(x), compiled(x)
        whole = fp.report()["models"]["SwinTransformer"]
        self.assertTrue(whole["passed"] and whole["compiled_by_program"], whole)
        self.assertEqual(whole["graph_rewrites"], 9, whole)  # 2 blocks x 4, the patch embedding
        self.assertLess(fp.rel_err(out, ref), 1e-4)
        self.assertLess(fp.rel_err(again, ref), 1e-4)
        self.assertEqual(model.__dict__["_fuseprof_program_backend"].rewrites, 9)
        self.assertTrue(any(why.startswith("the program compiles the model itself") for why in fp.report()["left_alone"]))

        for how in ("torch.compile", "Module.compile"):
            reset()
            torch._dynamo.reset()
            model = swin(drop_path=0.5).train()
            if how == "torch.compile":
                step = torch.compile(model)
            else:
                model.compile()
                step = model
            step(x).sum().backward()
            whole = fp.report()["models"]["swin_tiny_patch4_window7_224"]
            self.assertTrue(whole["training"] and whole["passed"] and whole["compiled_by_program"], (how, whole))
            self.assertTrue(all(m["passed"] and "grad_rel_error" in m for m in fp.report()["modules"].values()), how)
            self.assertIsNotNone(model.layers[0].blocks[0].attn.relative_position_bias_table.grad, how)

        reset()
        torch._dynamo.reset()
        model = swin().eval()
        with torch.no_grad():
            torch.compile(model, backend="aot_eager")(x)
        self.assertNotIn("_fuseprof_program_backend", model.__dict__)

    def test_activation_checkpointing_recomputes_what_the_forward_ran(self):
        """A model that checkpoints its blocks (timm's set_grad_checkpointing) trains through the
        patch layer: the blocks the autograd engine recomputes are not taken for models of their
        own (wrapped, they would recompute through the graph matcher what the forward ran as
        written, and PyTorch's checkpointing fails on the different saved tensors)."""
        x = torch.randn(2, 3, 56, 56)
        for own in (False, True):  # the rewritten graph kept, then the model's own forward
            reset()
            torch._dynamo.reset()
            torch.manual_seed(0)
            m = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=56, depths=(2, 2),
                                  num_heads=(3, 6), embed_dim=96, num_classes=10).train()
            m.set_grad_checkpointing(True)
            state = fp._captured_trains_faster
            fp._captured_trains_faster = lambda *args, keep=not own: keep
            try:
                for _ in range(2):
                    m(x).sum().backward()
            finally:
                fp._captured_trains_faster = state
            self.assertIsNotNone(m.layers[1].blocks[0].attn.relative_position_bias_table.grad)
            self.assertEqual([n for n in fp.report()["models"] if "/" in n], [])  # no block taken for a model

    def test_eager_training_keeps_the_faster_of_the_two_paths(self):
        """The first eager training call times the forward and backward of the model's own code
        and of the rewritten graph; the slower is dropped, the report says so, and the timing
        leaves no gradient and no running statistic behind."""
        import time

        reset()
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8)).train()
        model.__dict__["_fuseprof_seen"] = True  # timed here, not wrapped at its first call
        stats = model[1].running_mean.clone()
        x = torch.randn(16, 8)

        def slow(*args):
            time.sleep(0.02)
            return model(*args)

        self.assertFalse(fp._captured_trains_faster(model, "net", model, slow, (x,), {}))
        self.assertTrue(fp._captured_trains_faster(model, "net2", slow, model, (x,), {}))
        choice = fp.report()["eager_choice"]
        self.assertEqual(set(choice), {"net", "net2"})
        self.assertEqual((choice["net"]["captured"], choice["net2"]["captured"]), (False, True))
        self.assertTrue(choice["net"]["training"])
        self.assertTrue(any(why.startswith("eager training: the rewritten graph") for why in fp.report()["left_alone"]))
        self.assertTrue(all(p.grad is None for p in model.parameters()))
        self.assertTrue(torch.equal(model[1].running_mean, stats))

    def test_first_outermost_call_wraps_the_model(self):
        reset()
        fp._patch_torch(torch)
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = torchvision.models.swin_transformer.SwinTransformer(
            patch_size=[4, 4], embed_dim=96, depths=[2], num_heads=[3], window_size=[7, 7], num_classes=10).eval()
        with torch.no_grad():
            model.head.weight.normal_()
        x = torch.randn(2, 3, 56, 56)
        with torch.inference_mode():
            out = model(x)
            again = model(x)
        whole = fp.report()["models"]["SwinTransformer"]
        self.assertTrue(whole["passed"], whole)
        self.assertEqual(whole["graph_rewrites"], 9, whole)  # 2 blocks x 4, the patch embedding
        self.assertLess(fp.rel_err(again, out), 1e-5)
        self.assertGreater(ops.REFERENCE_CALLS["window_attention"], 0)
        self.assertFalse(hasattr(model.features, "_fuseprof_wrapped"))  # inner modules are not models
        # In eager mode the rewritten graph is kept only where it timed faster than the model's
        # own forward on the first calls; either way the report says which ran.
        choice = fp.report()["eager_choice"]["SwinTransformer"]
        self.assertEqual(set(choice), {"own_ms", "captured_ms", "captured"})

        reset()
        plain = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()).eval()
        with torch.inference_mode():
            plain(torch.randn(3, 64))
            plain(torch.randn(3, 64))
        whole = fp.report()["models"]["Sequential"]
        self.assertEqual(whole["graph_rewrites"], 0)
        # Nothing replaced: the model runs its own forward (not its captured graph) from now on.
        self.assertEqual(ops.REFERENCE_CALLS, {})


class Settings(unittest.TestCase):
    """The settings `bench --apply` switches without editing the program."""

    def setUp(self):
        reset()
        settings._applied.clear()
        settings.DEVICES.add("cpu")
        self.addCleanup(settings.DEVICES.discard, "cpu")
        self.addCleanup(fp.configure, apply=fp._parse_apply("default"))

    def test_sdpa_cudnn_puts_cudnn_first_for_the_forward_on_both_sides(self):
        """sdpa_cudnn: the model's forward sees cuDNN first in SDPA's priority order, and the
        order is restored after; named in FUSEPROF_SETTINGS it applies on the baseline side
        (the layer not patching) and is reported as the baseline's, not the patched side's."""
        cudnn = int(torch.nn.attention.SDPBackend.CUDNN_ATTENTION)
        seen = []

        class Attn(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = torch.nn.Linear(8, 8)

            def forward(self, x):
                seen.append(torch._C._get_sdp_priority_order()[0])
                return F.scaled_dot_product_attention(x, x, self.proj(x))

        before = torch._C._get_sdp_priority_order()
        fp.configure(enabled=False)
        self.addCleanup(fp.configure, enabled=True)
        old = fp._both
        fp._both = {"sdpa_cudnn"}
        self.addCleanup(setattr, fp, "_both", old)
        model = fp.wrap_model(Attn().eval(), "attn")
        with torch.no_grad():
            out = model(torch.randn(1, 2, 5, 8))
        self.assertEqual(out.shape, (1, 2, 5, 8))
        self.assertEqual(seen, [cudnn])
        self.assertEqual(torch._C._get_sdp_priority_order(), before)
        self.assertIn("sdpa_cudnn", settings.applied())
        # The baseline's setting is not something the patched side switched.
        fp.configure(enabled=True)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.json")
            old_env = os.environ.get("FUSEPROF_PATCH_REPORT")
            os.environ["FUSEPROF_PATCH_REPORT"] = path
            fp._report["models"]["attn"] = {"rel_error": 0.0}
            try:
                fp._write_report()
            finally:
                fp._report["models"].pop("attn", None)
                if old_env is None:
                    os.environ.pop("FUSEPROF_PATCH_REPORT")
                else:
                    os.environ["FUSEPROF_PATCH_REPORT"] = old_env
            with open(path) as f:
                written = json.load(f)
        self.assertNotIn("sdpa_cudnn", written["settings"])
        self.assertIn("sdpa_cudnn", written["baseline_settings"])

    def test_autocast_runs_the_forward_in_bf16_checked_against_float32(self):
        fp.configure(apply={"autocast_bf16"})
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).eval()
        plain = copy.deepcopy(net)
        model = fp.wrap_model(net, "net")
        x = torch.randn(16, 64)
        with torch.no_grad():
            fp.configure(enabled=False)
            try:
                want = plain(x)
            finally:
                fp.configure(enabled=True)
            out = model(x)
        self.assertEqual(out.dtype, torch.float32)  # handed back as the program's loss expects
        self.assertGreater(fp.rel_err(out, want), 1e-4)  # computed in bf16
        check = fp.report()["models"]["net"]
        self.assertEqual(check["tolerance"], settings.PRECISION_TOLERANCE)
        self.assertTrue(check["passed"] and 1e-4 < check["rel_error"] < settings.PRECISION_TOLERANCE, check)
        self.assertIn("autocast_bf16", settings.applied())
        # The program's own autocast is left as it is.
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
            self.assertEqual(model(x).dtype, torch.float16)

    def test_fused_optimizer_builds_adam_fused_unless_the_program_names_fused(self):
        built = []

        class Opt:
            def __init__(self, params, lr=1e-3, foreach=None, fused=None):
                built.append((list(params), foreach, fused))

        notes = []
        cuda = settings._cuda_floating
        settings._cuda_floating = lambda params: True
        self.addCleanup(setattr, settings, "_cuda_floating", cuda)
        settings._fuse_optimizer(Opt, lambda why, name: notes.append(why))
        p = torch.nn.Parameter(torch.ones(2))
        Opt((q for q in [p]), lr=0.1, foreach=True)
        self.assertEqual(built[-1][1:], (None, True))
        self.assertEqual(len(built[-1][0]), 1)  # the generator's parameters reach the optimizer
        Opt([p], fused=False)
        self.assertEqual(built[-1][2], False)
        self.assertIn("names fused=False", notes[-1])
        # AdamW's __init__ calls Adam's: decided once, no note of a `fused` the program named.
        for cls in (torch.optim.Adam, torch.optim.AdamW):
            self.addCleanup(setattr, cls, "__init__", cls.__init__)
            settings._fuse_optimizer(cls, lambda why, name: notes.append(why))
        before = len(notes)
        self.assertTrue(torch.optim.AdamW([p], lr=1e-3).defaults["fused"])
        self.assertEqual(len(notes), before)
        settings._cuda_floating = cuda
        Opt([p])  # a CPU parameter: kept
        self.assertEqual(built[-1][2], None)
        self.assertIn("not a floating CUDA tensor", notes[-1])

    def test_channels_last_converts_the_model_and_its_4d_inputs(self):
        fp.configure(apply={"channels_last"})
        conv = torch.nn.Conv2d(3, 8, 3)
        model = fp.wrap_model(torch.nn.Sequential(conv), "convnet")
        seen = []
        conv.register_forward_pre_hook(lambda m, a: seen.append(a[0].is_contiguous(memory_format=torch.channels_last)))
        with torch.no_grad():
            model(torch.randn(2, 3, 16, 16))
        self.assertTrue(conv.weight.is_contiguous(memory_format=torch.channels_last))
        self.assertTrue(seen and all(seen))

    def test_input_pipeline_loads_ahead_in_more_workers(self):
        """input_pipeline: a DataLoader with workers gets as many as the cores allow (at most
        MAX_WORKERS, never fewer than the program's), a deeper prefetch and pinned memory on a
        CUDA machine; one that loads in the program's own process is left alone, and says why;
        the batches and their order stay the same."""
        args = {"num_workers": 2}
        self.assertEqual(settings.loader_arguments(args, 16, True),
                         ["num_workers=8 (was 2)", "prefetch_factor=4 (was 2)", "pin_memory=True (was False)"])
        self.assertEqual(args, {"num_workers": 8, "prefetch_factor": 4, "pin_memory": True})
        args = {"num_workers": 12, "prefetch_factor": 6, "pin_memory": True}
        self.assertEqual(settings.loader_arguments(args, 4, True), [])
        self.assertEqual(settings.loader_arguments({"num_workers": 0}, 16, True), [])
        self.assertEqual(settings.loader_arguments({"num_workers": 1}, 2, False),
                         ["num_workers=2 (was 1)", "prefetch_factor=4 (was 2)"])

        from torch.utils.data import DataLoader, TensorDataset

        original = DataLoader.__init__
        self.addCleanup(setattr, DataLoader, "__init__", original)
        notes = []
        settings.install({"input_pipeline"}, lambda why, name: notes.append(why))
        data = TensorDataset(torch.arange(12.0))
        loader = DataLoader(data, 3, num_workers=1)
        self.assertEqual((loader.num_workers, loader.prefetch_factor),
                         (max(1, min(settings._cores(), settings.MAX_WORKERS)), 4))
        self.assertEqual([b[0].tolist() for b in loader], [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]])
        self.assertIn("prefetch_factor=4 (was 2)", settings.applied()["input_pipeline"])
        self.assertEqual(DataLoader(data, 3).num_workers, 0)
        self.assertTrue(any("loads in the program's own process" in n for n in notes), notes)

    def test_process_wide_switches(self):
        before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)

        def restore():
            (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.backends.cudnn.benchmark) = before

        self.addCleanup(restore)
        settings.install({"tf32", "cudnn_benchmark"}, lambda why, name: None)
        self.assertTrue(torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32)
        self.assertTrue(torch.backends.cudnn.benchmark)
        self.assertEqual(set(settings.applied()), {"tf32", "cudnn_benchmark"})
        self.assertNotIn("tf32", fp.DEFAULT_PATTERNS)


class StepClock(unittest.TestCase):
    def test_the_patch_layers_own_synchronizes_are_not_the_programs(self):
        """The numerics checks and timings of a model's first call synchronize; the step clock
        must not take those for the program's, or the patched side's timed loop would start
        after them and differ from the baseline's."""
        import subprocess
        import sys

        code = ("import torch\n"
                "torch.cuda.synchronize = lambda *a, **k: None  # no GPU here: a synchronize that returns\n"
                "import fuseprof_steps, fuseprof_patch as fp\n"
                "fuseprof_steps.install()\n"
                "torch.cuda.synchronize()\n"
                "with fuseprof_steps.quiet():\n"
                "    torch.cuda.synchronize()\n"
                "torch.cuda.is_available = torch.cuda.is_initialized = lambda: True\n"
                "fp._captured_is_faster(torch.nn.Linear(4, 4), 'm', lambda x: x, lambda x: x, (torch.ones(4),), {})\n"
                "torch.cuda.synchronize()\n"
                "print(len(fuseprof_steps._syncs))\n")
        here = os.path.dirname(os.path.abspath(fp.__file__))
        env = dict(os.environ, PYTHONPATH=here, FUSEPROF_PATCH_CPP="0")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "2")

    def test_the_losses_the_program_trains_on_are_recorded(self):
        """Each one-element tensor the program calls .backward() on is a point of its loss
        curve, written at exit; a NaN is written as one (JSON has no NaN)."""
        import json
        import subprocess
        import sys
        import tempfile

        code = ("import torch, fuseprof_steps\n"
                "fuseprof_steps.install()\n"
                "torch.manual_seed(0)\n"
                "model = torch.nn.Linear(4, 1)\n"
                "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                "x, y = torch.randn(16, 4), torch.randn(16, 1)\n"
                "for _ in range(3):\n"
                "    opt.zero_grad()\n"
                "    loss = ((model(x) - y) ** 2).mean()\n"
                "    loss.backward()\n"
                "    opt.step()\n"
                "    print(repr(loss.item()))\n"
                "model(x).sum(0).backward()  # not a scalar by shape alone: one element, a loss\n"
                "(model(x) * float('nan')).mean().backward()\n"
                "model(x).backward(torch.ones(16, 1))  # a gradient handed in: not a loss\n")
        here = os.path.dirname(os.path.abspath(fp.__file__))
        with tempfile.TemporaryDirectory() as d:
            prefix = os.path.join(d, "steps")
            env = dict(os.environ, PYTHONPATH=here, FUSEPROF_STEPS_REPORT=prefix)
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr)
            printed = [float(v) for v in r.stdout.split()]
            (name,) = [n for n in os.listdir(d) if n.startswith("steps.")]
            with open(os.path.join(d, name)) as f:
                losses = json.load(f)["losses"]
        self.assertEqual(losses[:3], printed)
        self.assertEqual(len(losses), 5, losses)
        self.assertEqual(losses[4], "nan")

    def test_a_process_that_ran_no_model_keeps_the_report_of_one_that_did(self):
        """torchrun's launcher imports torch and exits after its workers: its empty report must
        not replace the one the rank that ran the model wrote."""
        import json
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "report.json")
            with open(path, "w") as f:
                json.dump({"modules": {"M/attn": {"passed": True}}, "models": {"M": {}}}, f)
            saved = {k: fp._report[k] for k in ("models", "modules")}
            old = os.environ.get("FUSEPROF_PATCH_REPORT")
            os.environ["FUSEPROF_PATCH_REPORT"] = path
            try:
                fp._report["models"], fp._report["modules"] = {}, {}
                fp._write_report()
                with open(path) as f:
                    self.assertIn("M/attn", json.load(f)["modules"])
                fp._report["models"] = {"N": {"rel_error": 0.0}}
                fp._write_report()
                with open(path) as f:
                    self.assertIn("N", json.load(f)["models"])
            finally:
                fp._report.update(saved)
                if old is None:
                    os.environ.pop("FUSEPROF_PATCH_REPORT", None)
                else:
                    os.environ["FUSEPROF_PATCH_REPORT"] = old

    def test_the_nudged_run_moves_every_parameter_by_the_nudge_and_nothing_else(self):
        """FUSEPROF_NUDGE moves each floating-point parameter of the first model called by that
        relative size, up or down, once, and leaves the program's random stream as it was."""
        import subprocess
        import sys

        code = ("import torch, fuseprof_steps\n"
                "fuseprof_steps.install()\n"
                "torch.manual_seed(0)\n"
                "model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64))\n"
                "head = torch.nn.Linear(64, 64)\n"
                "head.weight = model[0].weight  # shared: moved once\n"
                "before = [p.detach().clone() for p in model.parameters()]\n"
                "x = torch.randn(8, 64)\n"
                "state = torch.random.get_rng_state()\n"
                "model(x); model(x); head(x); head(x)\n"
                "assert torch.equal(state, torch.random.get_rng_state())\n"
                "ratios = torch.cat([(p.detach() / b).flatten() for p, b in zip(model.parameters(), before)])\n"
                "ratios = ratios[torch.cat([b.flatten() for b in before]) != 0]\n"
                "up = (ratios - 1).abs().sub(2 ** -9).abs().max().item()\n"
                "print(up < 1e-6, (ratios > 1).float().mean().item())\n")
        here = os.path.dirname(os.path.abspath(fp.__file__))
        for nudge, want in ((str(2 ** -9), True), ("", False)):
            env = dict(os.environ, PYTHONPATH=here, FUSEPROF_NUDGE=nudge)
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr)
            exact, share_up = r.stdout.split()
            self.assertEqual(exact == "True", want, r.stdout)
            if want:
                self.assertTrue(0.4 < float(share_up) < 0.6, r.stdout)


class Compile(unittest.TestCase):
    def test_dynamo_traces_the_operators(self):
        """torch.compile captures the patched model with the fuseprof ops as graph nodes."""
        reset()
        torch.manual_seed(0)
        model = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=2).eval()
        x = torch.randn(1, 3, 224, 224)
        with torch.inference_mode():
            ref = model(x)
            counts = {}

            def backend(gm, example_inputs):
                for node in gm.graph.nodes:
                    if node.op == "call_function" and "fuseprof" in str(node.target):
                        op = str(node.target).removesuffix(".default")
                        counts[op] = counts.get(op, 0) + 1
                return gm.forward

            torch._dynamo.reset()
            out = torch.compile(model.forward, backend=backend, fullgraph=True)(x)
        self.assertEqual(counts.get("fuseprof.attention"), 2, counts)
        self.assertLess(fp.rel_err(out, ref), 1e-4)


if __name__ == "__main__":
    unittest.main()
