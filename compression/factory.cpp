#include "compression/factory.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <string>

#include "compression/codecs.hpp"
#include "core/error.hpp"

namespace geotrain::compression {
namespace {

struct Options {
  std::string codec;
  std::map<std::string, std::string, std::less<>> values;  // flags map to ""
};

Options split_options(std::string_view text, std::string_view whole) {
  Options o;
  const size_t colon = text.find(':');
  o.codec = std::string(text.substr(0, colon));
  if (colon == std::string_view::npos) return o;
  std::string_view rest = text.substr(colon + 1);
  GT_REQUIRE(!rest.empty(), "codec spec '{}': empty option list after ':'", whole);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    GT_REQUIRE(!item.empty(), "codec spec '{}': empty option", whole);
    const size_t eq = item.find('=');
    std::string key(item.substr(0, eq));
    std::string value = eq == std::string_view::npos ? "" : std::string(item.substr(eq + 1));
    GT_REQUIRE(eq == std::string_view::npos || !value.empty(),
               "codec spec '{}': option '{}' has no value", whole, key);
    GT_REQUIRE(o.values.emplace(key, value).second, "codec spec '{}': option '{}' given twice",
               whole, key);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    GT_REQUIRE(comma == std::string_view::npos || !rest.empty(), "codec spec '{}': trailing ','",
               whole);
  }
  return o;
}

template <typename T>
T parse_number(const Options& o, std::string_view key, T fallback, std::string_view whole) {
  auto it = o.values.find(key);
  if (it == o.values.end()) return fallback;
  const std::string& s = it->second;
  T value{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  GT_REQUIRE(ec == std::errc{} && end == s.data() + s.size() && !s.empty(),
             "codec spec '{}': {}={} is not a valid {}", whole, key, s,
             std::is_floating_point_v<T> ? "number" : "non-negative integer");
  return value;
}

bool take_flag(const Options& o, std::string_view key, std::string_view whole) {
  auto it = o.values.find(key);
  if (it == o.values.end()) return false;
  GT_REQUIRE(it->second.empty(), "codec spec '{}': '{}' is a flag and takes no value", whole, key);
  return true;
}

bool contains(std::initializer_list<std::string_view> list, std::string_view s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

std::string join(std::initializer_list<std::string_view> list) {
  std::string s;
  for (auto a : list) s += (s.empty() ? "" : ", ") + std::string(a);
  return s.empty() ? "none" : s;
}

void allow_only(const Options& o, std::initializer_list<std::string_view> allowed,
                std::string_view whole) {
  for (const auto& [key, value] : o.values)
    GT_REQUIRE(contains(allowed, key), "codec spec '{}': unknown option '{}' for {} (allowed: {})",
               whole, key, o.codec, join(allowed));
}

// The value of `key`, one of `allowed`; `fallback` when the option is absent.
std::string_view take_choice(const Options& o, std::string_view key,
                             std::initializer_list<std::string_view> allowed,
                             std::string_view fallback, std::string_view whole) {
  auto it = o.values.find(key);
  if (it == o.values.end()) return fallback;
  GT_REQUIRE(!it->second.empty(), "codec spec '{}': option '{}' needs a value (allowed: {})", whole,
             key, join(allowed));
  GT_REQUIRE(contains(allowed, it->second),
             "codec spec '{}': {}={} is invalid for {} (allowed: {})", whole, key, it->second,
             o.codec, join(allowed));
  return it->second;
}

// The settings of the codec before any '+': its name and options, checked for form here (the
// codec's constructor checks their values).
CodecSettings parse_base(std::string_view text, std::string_view whole) {
  const Options o = split_options(text, whole);
  CodecSettings s;
  if (o.codec == "fp32" || o.codec == "fp16" || o.codec == "bf16") {
    allow_only(o, {}, whole);
    s.id = o.codec == "fp32" ? CodecId::fp32 : o.codec == "fp16" ? CodecId::fp16 : CodecId::bf16;
    return s;
  }
  if (o.codec == "int8" || o.codec == "int4") {
    allow_only(o, {"chunk", "stochastic", "seed", "step"}, whole);
    s.id = o.codec == "int8" ? CodecId::int8 : CodecId::int4;
    s.quant.chunk = parse_number<uint32_t>(o, "chunk", kDefaultChunk, whole);
    s.quant.stochastic = take_flag(o, "stochastic", whole);
    s.quant.seed = parse_number<uint64_t>(o, "seed", 0, whole);
    s.quant.step = parse_number<float>(o, "step", 0.0f, whole);
    GT_REQUIRE(!o.values.contains("step") || s.quant.step > 0.0f,
               "codec spec '{}': step={} is invalid: must be in [{}, {}] (a multiple of the "
               "chunk's RMS; leave it out for the absmax scale)",
               whole, o.values.find("step")->second, kMinStep, kMaxStep);
    GT_REQUIRE(s.quant.stochastic || !o.values.contains("seed"),
               "codec spec '{}': seed only applies with stochastic rounding", whole);
    return s;
  }
  if (o.codec == "onebit") {
    allow_only(o, {"chunk", "scale"}, whole);
    s.id = CodecId::onebit;
    s.quant.chunk = parse_number<uint32_t>(o, "chunk", kDefaultChunk, whole);
    const bool rms = take_choice(o, "scale", {"mean", "rms"}, "mean", whole) == "rms";
    s.onebit_scale = rms ? OnebitScale::rms : OnebitScale::mean;
    return s;
  }
  if (o.codec == "fp4") {
    allow_only(o, {"chunk"}, whole);
    s.id = CodecId::fp4;
    s.quant.chunk = parse_number<uint32_t>(o, "chunk", kDefaultChunk, whole);
    return s;
  }
  if (o.codec == "topk") {
    allow_only(o, {"ratio", "sample", "bits", "chunk"}, whole);
    TopkOptions& t = s.topk;
    t.ratio = parse_number<double>(o, "ratio", t.ratio, whole);
    t.sample = parse_number<uint32_t>(o, "sample", t.sample, whole);
    t.bits = parse_number<uint32_t>(o, "bits", 0, whole);
    t.chunk = parse_number<uint32_t>(o, "chunk", kDefaultChunk, whole);
    const bool quantised = o.values.contains("bits");
    GT_REQUIRE(!quantised || t.bits == 2 || t.bits == 4 || t.bits == 8,
               "codec spec '{}': bits={} is invalid for topk (allowed: 2, 4, 8; leave it out for "
               "fp32 values)",
               whole, o.values.find("bits")->second);
    GT_REQUIRE(quantised || !o.values.contains("chunk"),
               "codec spec '{}': chunk only applies to topk with bits (chunked selection)", whole);
    GT_REQUIRE(!quantised || !o.values.contains("sample"),
               "codec spec '{}': sample does not apply to topk with bits (each chunk is selected "
               "exactly)",
               whole);
    s.id = quantised ? CodecId::qtopk : CodecId::topk;
    return s;
  }
  if (o.codec == "powersgd") {
    allow_only(o, {"rank", "fallback", "seed"}, whole);
    s.id = CodecId::powersgd;
    PowerSgdOptions& p = s.powersgd;
    p.rank = parse_number<uint32_t>(o, "rank", p.rank, whole);
    p.seed = parse_number<uint64_t>(o, "seed", p.seed, whole);
    static constexpr std::pair<std::string_view, CodecId> kFallbacks[] = {
        {"fp32", CodecId::fp32},    {"fp16", CodecId::fp16}, {"bf16", CodecId::bf16},
        {"int8", CodecId::int8},    {"int4", CodecId::int4}, {"fp4", CodecId::fp4},
        {"onebit", CodecId::onebit}};
    const std::string_view fallback = take_choice(
        o, "fallback", {"fp32", "fp16", "bf16", "int8", "int4", "fp4", "onebit"}, "fp16", whole);
    for (const auto& [name, id] : kFallbacks)
      if (name == fallback) p.fallback = id;
    return s;
  }
  GT_REQUIRE(false,
             "codec spec '{}': unknown codec '{}' (allowed: fp32, fp16, bf16, int8, int4, fp4, "
             "onebit, topk, powersgd)",
             whole, o.codec);
  return s;
}

std::unique_ptr<Codec> make_base(const CodecSettings& s) {
  switch (s.id) {
    case CodecId::fp32:
      return make_fp32_codec();
    case CodecId::fp16:
      return make_fp16_codec();
    case CodecId::bf16:
      return make_bf16_codec();
    case CodecId::int8:
      return make_int8_codec(s.quant);
    case CodecId::int4:
      return make_int4_codec(s.quant);
    case CodecId::onebit:
      return make_onebit_codec(s.quant.chunk, s.onebit_scale);
    case CodecId::fp4:
      return make_fp4_codec(s.quant.chunk);
    case CodecId::topk:
    case CodecId::qtopk:
      return make_topk_codec(s.topk);
    case CodecId::powersgd:
      return make_powersgd_codec(s.powersgd);
    case CodecId::zstd:
      break;
  }
  GT_ASSERT(false, "codec settings name {}, not a base codec", codec_name(s.id));
  return nullptr;
}

}  // namespace

namespace {

// The spec's settings, checked for form only (make_codec's constructors check the values).
CodecSettings parse_form(std::string_view spec) {
  GT_REQUIRE(!spec.empty(),
             "codec spec is empty (allowed: fp32, fp16, bf16, int8, int4, fp4, onebit, topk, "
             "powersgd)");
  const size_t plus = spec.find('+');
  CodecSettings s = parse_base(spec.substr(0, plus), spec);
  if (plus != std::string_view::npos) {
    const std::string_view stage = spec.substr(plus + 1);
    const Options o = split_options(stage, spec);
    GT_REQUIRE(o.codec == "zstd", "codec spec '{}': unknown stage '{}' after '+' (allowed: zstd)",
               spec, o.codec);
    allow_only(o, {"level"}, spec);
    s.zstd_level = parse_number<int>(o, "level", 3, spec);
  }
  return s;
}

}  // namespace

CodecSettings parse_codec_spec(std::string_view spec) {
  CodecSettings s = parse_form(spec);
  make_codec(s);  // the values: each codec's constructor checks its own
  return s;
}

std::unique_ptr<Codec> make_codec(const CodecSettings& settings) {
  auto codec = make_base(settings);
  if (!settings.zstd_level) return codec;
  return make_zstd_stage(std::move(codec), *settings.zstd_level);
}

std::unique_ptr<Codec> make_codec(std::string_view spec) { return make_codec(parse_form(spec)); }

std::vector<std::string> standard_codec_specs() {
  return {"fp32",
          "fp16",
          "bf16",
          "int8",
          "int8:stochastic",
          "int4",
          "onebit",
          "onebit+zstd",
          "topk:ratio=0.01",
          "topk:ratio=0.01+zstd",
          "int8+zstd",
          "fp4",
          "topk:ratio=0.02,bits=2",
          "topk:ratio=0.02,bits=2+zstd",
          "powersgd:rank=4"};
}

}  // namespace geotrain::compression
