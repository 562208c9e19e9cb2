"""The patch layer on CPU: which modules are matched and replaced, weight padding, the
fuseprof::* operators (schemas, fake implementations, CPU references) and the numerics
comparison. Run by fusion-advisor/tests/patch_layer.rs with the patch folder on PYTHONPATH;
needs torch, timm and transformers (the README's test command installs them).

The fused path runs on CPU through the operators' reference implementations, which are the
definitions the CUDA kernels are checked against; the patched module's output is compared
with the original module's, as on the GPU.
"""
import os
import unittest

os.environ["FUSEPROF_PATCH"] = "1"
os.environ.pop("FUSEPROF_PATCH_APPLY", None)
os.environ["FUSEPROF_PATCH_CPP"] = "0"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import fuseprof_patch as fp  # noqa: E402
import fuseprof_patch_ops as ops  # noqa: E402

fp.DEVICES.add("cpu")
ops.register()
import timm  # noqa: E402
import transformers  # noqa: E402

fp._patch_timm(timm)
fp._patch_transformers(transformers)


def reset():
    rep = fp.report()
    for k in ("modules", "models", "left_alone", "approximations", "patched"):
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
        rep = fp.report()
        blocks = {k: v for k, v in rep["modules"].items() if v["class"] == "SwinTransformerBlock"}
        self.assertEqual(len(blocks), 12, rep["modules"].keys())
        self.assertTrue(all(v["passed"] for v in blocks.values()), blocks)
        model_rep = rep["models"]["swin_tiny_patch4_window7_224"]
        self.assertTrue(model_rep["passed"], model_rep)
        self.assertFalse(model_rep["any_nan"])
        # The fused path ran, once per block (the first call also runs the original to compare).
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
            with torch.inference_mode():
                model(torch.randn(1, 3, 112, 112))
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

    def test_training_is_left_alone(self):
        reset()
        model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=112)
        model.train()
        model(torch.randn(1, 3, 112, 112)).sum().backward()
        rep = fp.report()
        self.assertEqual(rep["modules"], {})
        self.assertIn("training mode: the bundled kernels have no backward pass", rep["left_alone"])
        self.assertEqual(ops.REFERENCE_CALLS, {})

    def test_without_window_attention_pattern(self):
        reset()
        fp.configure(apply=[p for p in fp.DEFAULT_PATTERNS if p != "window_attention"])
        try:
            model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=112).eval()
            with torch.inference_mode():
                model(torch.randn(1, 3, 112, 112))
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
        with torch.inference_mode():
            model(torch.randn(2, 3, 224, 224))
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
            with torch.inference_mode():
                model(input_ids=torch.randint(0, 1000, (2, 8)))
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
