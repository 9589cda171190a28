// geotrain.Codec, geotrain.ErrorFeedback and the payload functions: thin bindings of
// compression/ (codec.hpp, error_feedback.hpp, factory.hpp, payload.hpp). Arrays are borrowed
// (buffers.hpp); the GIL is released while a codec runs.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "buffers.hpp"
#include "compression/error_feedback.hpp"
#include "compression/factory.hpp"
#include "compression/payload.hpp"

namespace geotrain::python {

namespace {

using compression::Codec;
using compression::ErrorFeedback;

py::bytes to_bytes(const Bytes& b) {
  return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
}

// ErrorFeedback owns its codec; from Python it is built from a spec, or from a Codec's spec
// (so the Python Codec object stays usable on its own).
std::unique_ptr<ErrorFeedback> make_error_feedback(const py::handle& codec, bool fused) {
  std::string spec;
  if (py::isinstance<py::str>(codec))
    spec = codec.cast<std::string>();
  else
    spec = codec.cast<const Codec&>().spec();
  return std::make_unique<ErrorFeedback>(compression::make_codec(spec), fused);
}

py::dict header_dict(const compression::PayloadHeader& h) {
  py::dict d;
  d["codec"] = compression::codec_name(h.codec);
  d["version"] = h.version;
  d["flags"] = h.flags;
  d["stochastic"] = (h.flags & compression::kFlagStochastic) != 0;
  d["chunk"] = h.chunk;
  d["aux"] = h.aux;
  d["elements"] = h.elements;
  d["body_bytes"] = h.body_bytes;
  d["checksum"] = h.checksum;
  return d;
}

}  // namespace

void bind_codecs(py::module_& m) {
  py::class_<Codec, std::unique_ptr<Codec>>(m, "Codec", R"doc(
A codec from a spec string, exactly as configs and command lines take it (docs/codecs.md):
"fp32", "fp16", "bf16", "int8[:chunk=N,stochastic,seed=N]", "int4[...]", "onebit[:chunk=N]",
"topk[:ratio=R,sample=N]", any of them followed by "+zstd[:level=N]".

encode() reads float32 memory (NumPy arrays, CPU torch tensors, any buffer) without copying it
and returns the self-describing payload as bytes; decode() writes into the caller's array.
One Codec is used by one thread at a time (stochastic rounding advances a counter).)doc")
      .def(py::init([](const std::string& spec) { return compression::make_codec(spec); }),
           py::arg("spec"))
      .def_property_readonly("spec", &Codec::spec, "canonical spec (accepted by Codec())")
      .def_property_readonly(
          "name", [](const Codec& c) { return compression::codec_name(c.id()); },
          "the outer codec's name, as in payload headers (a +zstd codec is 'zstd')")
      .def_property_readonly("lossless", &Codec::lossless)
      .def("max_payload_bytes", &Codec::max_payload_bytes, py::arg("n"),
           "upper bound on the payload size for n elements")
      .def(
          "encode",
          [](Codec& c, const py::handle& x) {
            auto v = float_view(x, false, "x");
            Bytes out;
            {
              py::gil_scoped_release nogil;
              c.encode(v.span, out);
            }
            return to_bytes(out);
          },
          py::arg("x"), "payload (bytes) encoding the float32 array x")
      .def(
          "decode",
          [](const Codec& c, const py::handle& payload, const py::handle& out) {
            auto p = byte_view(payload, "payload");
            auto y = float_view(out, true, "out");
            py::gil_scoped_release nogil;
            c.decode(p.span, y.span);
          },
          py::arg("payload"), py::arg("out"),
          "out[:] = decoded payload (out's size must equal the payload's element count; a payload "
          "of another codec is refused); out is unchanged on any error")
      .def(
          "decode_add",
          [](const Codec& c, const py::handle& payload, const py::handle& out) {
            auto p = byte_view(payload, "payload");
            auto y = float_view(out, true, "out");
            py::gil_scoped_release nogil;
            c.decode_add(p.span, y.span);
          },
          py::arg("payload"), py::arg("out"), "out += decoded payload")
      .def("__repr__", [](const Codec& c) { return "geotrain.Codec('" + c.spec() + "')"; });

  py::class_<ErrorFeedback>(m, "ErrorFeedback", R"doc(
Error feedback over a codec: per stream (any integer id: a shard, a tensor, a parameter group)
it keeps a residual e and encodes  x = g + e;  c = C(x);  e = x - D(c),  so what one round
drops is sent in later rounds. Takes a Codec (its spec is copied: the ErrorFeedback owns a codec
of its own) or a spec string. fused=False forces the reference path (same bytes).)doc")
      .def(py::init(&make_error_feedback), py::arg("codec"), py::arg("fused") = true)
      .def_property_readonly("spec", [](const ErrorFeedback& ef) { return ef.codec().spec(); })
      .def(
          "encode",
          [](ErrorFeedback& ef, const py::handle& g, uint64_t stream) {
            auto v = float_view(g, false, "g");
            Bytes out;
            {
              py::gil_scoped_release nogil;
              ef.encode(stream, v.span, out);
            }
            return to_bytes(out);
          },
          py::arg("g"), py::arg("stream") = 0,
          "payload of g + residual(stream); updates that residual. The first call for a stream "
          "fixes its length")
      .def(
          "residual",
          [](const ErrorFeedback& ef, uint64_t stream) {
            const auto r = ef.residual(stream);
            py::bytes raw(reinterpret_cast<const char*>(r.data()), r.size() * sizeof(float));
            return py::module_::import("numpy").attr("frombuffer")(raw, "float32").attr("copy")();
          },
          py::arg("stream") = 0, "a copy of a stream's residual (empty before its first encode)")
      .def(
          "set_residual",
          [](ErrorFeedback& ef, uint64_t stream, const py::handle& values) {
            auto v = float_view(values, false, "values");
            ef.set_residual(stream, v.span);
          },
          py::arg("stream"), py::arg("values"))
      .def("reset", &ErrorFeedback::reset, py::arg("stream") = 0, "forget a stream's residual")
      .def("streams", &ErrorFeedback::streams)
      .def("__repr__", [](const ErrorFeedback& ef) {
        return "geotrain.ErrorFeedback('" + ef.codec().spec() + "')";
      });

  m.def(
      "decode",
      [](const py::handle& payload, const py::handle& out) {
        auto p = byte_view(payload, "payload");
        auto y = float_view(out, true, "out");
        py::gil_scoped_release nogil;
        compression::decode_payload(p.span, y.span);
      },
      py::arg("payload"), py::arg("out"),
      "decode any payload by the codec named in its header (the receiving side needs no spec)");
  m.def(
      "payload_header",
      [](const py::handle& payload) {
        auto p = byte_view(payload, "payload");
        return header_dict(compression::parse_header(p.span));
      },
      py::arg("payload"), "the validated 40-byte header of a payload, as a dict");
  m.def("standard_codec_specs", &compression::standard_codec_specs,
        "the specs `geotrain bench codecs` runs: every codec with defaults and a few variants");
}

}  // namespace geotrain::python
