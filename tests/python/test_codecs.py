"""geotrain.Codec and geotrain.ErrorFeedback from Python: the same bytes as the C++ path
(tests/python/codec_reference.cpp calls compression/ directly), no copies of the caller's arrays
(NumPy and CPU torch tensors), and clear errors for what cannot be borrowed."""

import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import _support

geotrain = _support.import_geotrain()
torch = _support.import_torch()

SPECS = ["fp32", "fp16", "bf16", "int8", "int8:chunk=64,stochastic,seed=3", "int4:chunk=256",
         "onebit", "onebit:chunk=32", "topk:ratio=0.05", "topk:ratio=0.01+zstd", "int8+zstd:level=1"]


def reference():
    path = os.environ.get("GEOTRAIN_CODEC_REFERENCE")
    if not path or not os.path.exists(path):
        raise unittest.SkipTest("GEOTRAIN_CODEC_REFERENCE is not set (run through ctest)")
    return path


def data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    x[::7] *= 10  # heavy tails, so that topk and the scales have something to choose
    return x


class ByteEqualityWithCpp(unittest.TestCase):
    """Each spec: the Python module's payloads equal the C++ program's, byte for byte."""

    def run_reference(self, *args):
        subprocess.run([reference(), *args], check=True)

    def test_encode_matches_the_cpp_codec_for_every_spec(self):
        inputs = [data(5000, 1), data(5000, 2), data(33, 3)]
        with tempfile.TemporaryDirectory() as tmp:
            files = []
            for i, x in enumerate(inputs):
                files.append(os.path.join(tmp, f"in{i}.f32"))
                x.tofile(files[-1])
            for spec in SPECS + geotrain.standard_codec_specs():
                with self.subTest(spec=spec):
                    prefix = os.path.join(tmp, "out")
                    self.run_reference("encode", spec, prefix, *files)
                    codec = geotrain.Codec(spec)  # one codec, calls in the same order
                    for i, x in enumerate(inputs):
                        with open(f"{prefix}.{i}.bin", "rb") as f:
                            expected = f.read()
                        got = codec.encode(x)
                        self.assertEqual(len(got), len(expected))
                        self.assertEqual(got, expected, f"{spec}: input {i} differs")

    def test_error_feedback_matches_over_rounds_with_its_residual(self):
        rounds = [data(3000, 10 + r) for r in range(4)]
        with tempfile.TemporaryDirectory() as tmp:
            files = []
            for i, x in enumerate(rounds):
                files.append(os.path.join(tmp, f"g{i}.f32"))
                x.tofile(files[-1])
            for spec in ["onebit", "int4:chunk=128,stochastic", "topk:ratio=0.02"]:
                with self.subTest(spec=spec):
                    prefix = os.path.join(tmp, "ef")
                    self.run_reference("ef", spec, "5", prefix, *files)
                    ef = geotrain.ErrorFeedback(geotrain.Codec(spec))
                    for i, g in enumerate(rounds):
                        with open(f"{prefix}.{i}.bin", "rb") as f:
                            self.assertEqual(ef.encode(g, stream=5), f.read(), f"round {i}")
                    expected = np.fromfile(f"{prefix}.residual.f32", dtype=np.float32)
                    np.testing.assert_array_equal(ef.residual(5), expected)
                    self.assertEqual(ef.streams(), [5])

    def test_decode_matches_the_cpp_decoder(self):
        x = data(4096, 7)
        with tempfile.TemporaryDirectory() as tmp:
            for spec in ["int8", "onebit", "topk:ratio=0.1+zstd"]:
                payload = geotrain.Codec(spec).encode(x)
                path = os.path.join(tmp, "p.bin")
                with open(path, "wb") as f:
                    f.write(payload)
                self.run_reference("decode", path, str(x.size), os.path.join(tmp, "y.f32"))
                expected = np.fromfile(os.path.join(tmp, "y.f32"), dtype=np.float32)
                out = np.empty_like(x)
                geotrain.decode(payload, out)
                np.testing.assert_array_equal(out, expected)


class PayloadFormat(unittest.TestCase):
    """What docs/codecs.md promises, checked from Python independently of the C++ tests."""

    def test_fp32_payload_is_the_header_then_the_raw_values(self):
        x = data(100, 4)
        p = geotrain.Codec("fp32").encode(x)
        self.assertEqual(p[:4], b"GTC1")
        self.assertEqual(p[4], 1)
        self.assertEqual(len(p), 40 + 4 * x.size)
        self.assertEqual(p[40:], x.tobytes())
        h = geotrain.payload_header(p)
        self.assertEqual((h["codec"], h["elements"], h["body_bytes"]), ("fp32", 100, 400))

    def test_onebit_is_the_sign_and_the_mean_magnitude_per_chunk(self):
        x = data(256, 5)
        codec = geotrain.Codec("onebit:chunk=64")
        out = np.empty_like(x)
        codec.decode(codec.encode(x), out)
        for c in range(4):
            chunk = x[64 * c:64 * (c + 1)]
            scale = np.abs(chunk.astype(np.float64)).mean()
            np.testing.assert_allclose(np.abs(out[64 * c:64 * (c + 1)]), scale, rtol=1e-5)
            np.testing.assert_array_equal(np.signbit(out[64 * c:64 * (c + 1)]), chunk < 0)


class ZeroCopy(unittest.TestCase):
    def test_decode_writes_into_the_callers_numpy_array(self):
        x = data(1000, 8)
        out = np.zeros(1000, dtype=np.float32)
        address = out.ctypes.data
        geotrain.Codec("fp32").decode(geotrain.Codec("fp32").encode(x), out)
        self.assertEqual(out.ctypes.data, address)
        np.testing.assert_array_equal(out, x)

    def test_decode_add_accumulates_in_place(self):
        x = data(64, 9)
        out = np.ones(64, dtype=np.float32)
        geotrain.Codec("fp32").decode_add(geotrain.Codec("fp32").encode(x), out)
        np.testing.assert_array_equal(out, x + 1)

    def test_a_view_of_a_larger_array_is_written_where_it_lies(self):
        big = np.zeros(300, dtype=np.float32)
        geotrain.decode(geotrain.Codec("fp32").encode(np.full(100, 2, np.float32)), big[100:200])
        self.assertEqual(big[:100].sum(), 0)
        self.assertEqual(big[100:200].sum(), 200)
        self.assertEqual(big[200:].sum(), 0)

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_decode_into_a_torch_tensor_changes_the_tensor(self):
        t = torch.zeros(2, 500)  # float32, contiguous, CPU
        pointer = t.data_ptr()
        x = data(1000, 11)
        geotrain.Codec("fp32").decode(geotrain.Codec("fp32").encode(x), t)
        self.assertEqual(t.data_ptr(), pointer)
        np.testing.assert_array_equal(t.reshape(-1).numpy(), x)

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_encode_reads_the_tensors_memory(self):
        t = torch.zeros(1000)
        codec = geotrain.Codec("fp32")
        before = codec.encode(t)
        t.view(-1)[17] = 3.5  # change the memory behind the tensor, then encode again
        after = codec.encode(t)
        self.assertNotEqual(before, after)
        self.assertEqual(np.frombuffer(after[40:], np.float32)[17], 3.5)
        # a parameter that requires grad is read too (detached, still no copy)
        p = torch.nn.Parameter(torch.arange(64, dtype=torch.float32))
        self.assertEqual(codec.encode(p)[40:], p.detach().numpy().tobytes())

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_error_feedback_on_torch_tensors_matches_numpy(self):
        g = data(2048, 12)
        a = geotrain.ErrorFeedback("onebit").encode(torch.from_numpy(g.copy()))
        b = geotrain.ErrorFeedback("onebit").encode(g)
        self.assertEqual(a, b)


class Errors(unittest.TestCase):
    def test_a_bad_spec_names_what_is_allowed(self):
        with self.assertRaisesRegex(ValueError, "unknown option 'ratio' for onebit"):
            geotrain.Codec("onebit:ratio=0.1")

    def test_wrong_dtype_is_refused(self):
        with self.assertRaisesRegex(ValueError, "expected float32"):
            geotrain.Codec("int8").encode(np.zeros(10, dtype=np.float64))

    def test_non_contiguous_arrays_are_refused(self):
        with self.assertRaisesRegex(ValueError, "not contiguous"):
            geotrain.Codec("int8").encode(np.zeros(20, dtype=np.float32)[::2])
        out = np.zeros((4, 4), dtype=np.float32).T
        with self.assertRaisesRegex(ValueError, "not contiguous"):
            geotrain.decode(geotrain.Codec("fp32").encode(np.zeros(16, np.float32)), out)

    def test_read_only_output_is_refused(self):
        out = np.zeros(4, dtype=np.float32)
        out.setflags(write=False)
        with self.assertRaisesRegex(ValueError, "out"):
            geotrain.decode(geotrain.Codec("fp32").encode(np.zeros(4, np.float32)), out)

    def test_not_an_array_is_a_type_error(self):
        with self.assertRaisesRegex(TypeError, "expected a NumPy array"):
            geotrain.Codec("fp32").encode([1.0, 2.0])

    def test_a_corrupt_payload_changes_nothing(self):
        p = bytearray(geotrain.Codec("int8").encode(data(256, 13)))
        p[60] ^= 1
        out = np.full(256, 7, dtype=np.float32)
        with self.assertRaisesRegex(ValueError, "checksum"):
            geotrain.decode(bytes(p), out)
        self.assertTrue((out == 7).all())

    def test_a_size_mismatch_is_refused(self):
        with self.assertRaises(ValueError):
            geotrain.decode(geotrain.Codec("fp32").encode(np.zeros(8, np.float32)),
                            np.zeros(9, np.float32))

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_torch_errors_name_dtype_and_layout(self):
        codec = geotrain.Codec("fp32")
        with self.assertRaisesRegex(ValueError, "torch.float64"):
            codec.encode(torch.zeros(4, dtype=torch.float64))
        with self.assertRaisesRegex(ValueError, "not contiguous"):
            codec.encode(torch.zeros(4, 4).t())



class CodecSchedules(unittest.TestCase):
    """A codec schedule by round (docs/codecs.md, "Codec schedules") reaches a Python leader as
    the config writes it, and a bad one is refused naming the phase."""

    CONFIG = """
regions: [a, b]
model: {arch: "784-32-10"}
server:
  endpoints: {a: "tcp://127.0.0.1:7901", b: "tcp://127.0.0.1:7902"}
worker:
  critical_codec: [{until_round: 10, codec: int8}, {codec: onebit}]
  chunk_align: tensor
"""
    SERVERS = [("a", "tcp://127.0.0.1:7901"), ("b", "tcp://127.0.0.1:7902")]

    def test_leader_settings_pass_a_schedule_as_a_list_and_a_spec_as_a_string(self):
        s = geotrain._core.leader_settings(self.CONFIG, "schedule.yaml", "a")
        self.assertEqual(s["critical_codec"],
                         [{"until_round": 10, "codec": "int8"}, {"codec": "onebit"}])
        self.assertEqual(s["noncritical_codec"], "fp32")
        self.assertEqual(s["chunk_align"], "tensor")
        # The leader takes them as they are (nothing connects before connect()).
        geotrain.RegionSync([("fc.w", 100)], [], "a", self.SERVERS, s["critical_codec"],
                            s["noncritical_codec"], chunk_align=s["chunk_align"])

    def test_a_bad_schedule_is_refused_naming_the_phase(self):
        bad = [{"until_round": 10, "codec": "int8"}, {"until_round": 5, "codec": "onebit"}]
        with self.assertRaisesRegex(ValueError, r"critical_codec\[1\] is the last phase"):
            geotrain.RegionSync([("fc.w", 100)], [], "a", self.SERVERS, bad, "fp32")
        with self.assertRaisesRegex(ValueError, r"noncritical_codec\[0\] has an unknown key"):
            geotrain.RegionSync([("fc.w", 100)], [], "a", self.SERVERS, "fp32",
                                [{"codec": "int8", "level": 3}])
        with self.assertRaisesRegex(ValueError, "chunk_align is 'layer'"):
            geotrain.RegionSync([("fc.w", 100)], [], "a", self.SERVERS, chunk_align="layer")

if __name__ == "__main__":
    unittest.main()
