#include <doctest/doctest.h>

#include "compression/factory.hpp"
#include "core/error.hpp"

using namespace geotrain;
using namespace geotrain::compression;

TEST_CASE("specs build the codec they name, and spec() round-trips") {
  CHECK(make_codec("fp32")->id() == CodecId::fp32);
  CHECK(make_codec("onebit")->spec() == "onebit:chunk=1024");
  CHECK(make_codec("int4:chunk=256,stochastic")->spec() == "int4:chunk=256,stochastic,seed=0");
  CHECK(make_codec("int8:stochastic,seed=9")->spec() == "int8:chunk=1024,stochastic,seed=9");
  CHECK(make_codec("topk:ratio=0.001")->spec() == "topk:ratio=0.001,sample=4096");
  CHECK(make_codec("onebit+zstd")->spec() == "onebit:chunk=1024+zstd:level=3");
  CHECK(make_codec("onebit+zstd")->id() == CodecId::zstd);
  CHECK(make_codec("fp4")->spec() == "fp4:chunk=1024");
  CHECK(make_codec("fp4:chunk=32")->id() == CodecId::fp4);
  CHECK(make_codec("topk:ratio=0.02,bits=2")->spec() == "topk:ratio=0.02,bits=2,chunk=1024");
  CHECK(make_codec("topk:ratio=0.02,bits=2")->id() == CodecId::qtopk);
  CHECK(make_codec("topk:bits=8,chunk=64+zstd")->spec() ==
        "topk:ratio=0.01,bits=8,chunk=64+zstd:level=3");
  for (const auto& spec : standard_codec_specs()) {
    auto canonical = make_codec(spec)->spec();
    CHECK(make_codec(canonical)->spec() == canonical);
  }
}

TEST_CASE("bad specs are input errors that name what is wrong and what is allowed") {
  CHECK_THROWS_WITH_AS(make_codec(""), doctest::Contains("codec spec is empty"), InputError);
  CHECK_THROWS_WITH_AS(make_codec("int3"), doctest::Contains("unknown codec 'int3' (allowed: fp32"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("int8:chunk=100"), doctest::Contains("chunk 100 is invalid"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("int8:chunk=abc"), doctest::Contains("chunk=abc is not a valid"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("int8:chunk=-32"), doctest::Contains("not a valid"), InputError);
  CHECK_THROWS_WITH_AS(make_codec("onebit:ratio=0.1"),
                       doctest::Contains("unknown option 'ratio' for onebit (allowed: chunk, "
                                         "scale)"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("fp16:chunk=64"), doctest::Contains("(allowed: none)"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("topk:ratio=0"), doctest::Contains("ratio 0 is invalid"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("topk:ratio=1.5"), doctest::Contains("must be in (0, 1]"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("int8:seed=3"), doctest::Contains("seed only applies"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("int8:stochastic=yes"), doctest::Contains("is a flag"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("int8:chunk=64,chunk=64"), doctest::Contains("given twice"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("int8:"), doctest::Contains("empty option list"), InputError);
  CHECK_THROWS_WITH_AS(make_codec("int8+gzip"), doctest::Contains("unknown stage 'gzip'"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("int8+zstd:level=30"), doctest::Contains("level 30 is invalid"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("int8+zstd+zstd"), doctest::Contains("unknown stage"),
                       InputError);
}

TEST_CASE("bad fp4 and quantised topk specs name the key and the value") {
  CHECK_THROWS_WITH_AS(make_codec("topk:ratio=0.02,bits=3"),
                       doctest::Contains("bits=3 is invalid for topk (allowed: 2, 4, 8"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("topk:bits=0"), doctest::Contains("bits=0 is invalid"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("topk:bits=two"), doctest::Contains("bits=two is not a valid"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("topk:ratio=0.02,chunk=64"),
                       doctest::Contains("chunk only applies to topk with bits"), InputError);
  CHECK_THROWS_WITH_AS(make_codec("topk:bits=2,sample=64"),
                       doctest::Contains("sample does not apply to topk with bits"), InputError);
  CHECK_THROWS_WITH_AS(make_codec("topk:bits=2,chunk=100"),
                       doctest::Contains("chunk 100 is invalid"), InputError);
  CHECK_THROWS_WITH_AS(make_codec("topk:bits=2,ratio=2"), doctest::Contains("ratio 2 is invalid"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("topk:bits=2,scale=1"),
                       doctest::Contains("unknown option 'scale' for topk (allowed: ratio, sample, "
                                         "bits, chunk)"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("fp4:chunk=48"), doctest::Contains("fp4: chunk 48 is invalid"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("fp4:bits=4"),
                       doctest::Contains("unknown option 'bits' for fp4 (allowed: chunk)"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("fp5"), doctest::Contains("unknown codec 'fp5' (allowed: fp32"),
                       InputError);
}

TEST_CASE("onebit's scale option parses, round-trips, and a bad value names what is allowed") {
  CHECK(make_codec("onebit:scale=rms")->spec() == "onebit:chunk=1024,scale=rms");
  CHECK(make_codec("onebit:scale=mean")->spec() == "onebit:chunk=1024");  // the default
  CHECK(make_codec("onebit:chunk=64,scale=rms+zstd")->spec() ==
        "onebit:chunk=64,scale=rms+zstd:level=3");
  for (const char* spec : {"onebit:scale=rms", "onebit:scale=rms,chunk=32+zstd:level=1"}) {
    auto canonical = make_codec(spec)->spec();
    CHECK(make_codec(canonical)->spec() == canonical);
  }
  CHECK_THROWS_WITH_AS(make_codec("onebit:scale=max"),
                       doctest::Contains("codec spec 'onebit:scale=max': scale=max is invalid "
                                         "for onebit (allowed: mean, rms)"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("onebit:scale"),
                       doctest::Contains("option 'scale' needs a value (allowed: mean, rms)"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("fp4:scale=rms"),
                       doctest::Contains("unknown option 'scale' for fp4 (allowed: chunk)"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("int8:scale=rms"),
                       doctest::Contains("unknown option 'scale' for int8"), InputError);
}

TEST_CASE("int8 and int4 take step=K, a quantisation step of K times the chunk's RMS") {
  CHECK(make_codec("int4:step=2")->spec() == "int4:chunk=1024,step=2");
  CHECK(make_codec("int8:chunk=4096,step=0.5+zstd:level=9")->spec() ==
        "int8:chunk=4096,step=0.5+zstd:level=9");
  CHECK(parse_codec_spec("int4:step=1.75").quant.step == 1.75f);
  CHECK(parse_codec_spec("int4").quant.step == 0.0f);
  CHECK_THROWS_WITH_AS(make_codec("int4:step=0"),
                       doctest::Contains("codec spec 'int4:step=0': step=0 is invalid: must be in "
                                         "[0.015625, 16]"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("int4:step=100"),
                       doctest::Contains("int4: step 100 is invalid: must be in [0.015625, 16]"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("int8:step=-1"), doctest::Contains("step=-1 is invalid"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_codec("int8:step=two"),
                       doctest::Contains("step=two is not a valid number"), InputError);
  CHECK_THROWS_WITH_AS(make_codec("onebit:step=2"),
                       doctest::Contains("unknown option 'step' for onebit"), InputError);
  CHECK_THROWS_WITH_AS(make_codec("fp4:step=2"), doctest::Contains("unknown option 'step' for fp4"),
                       InputError);
}

TEST_CASE("parse_codec_spec: typed settings that build the same codec, and the same errors") {
  for (const auto& spec : standard_codec_specs()) {
    CAPTURE(spec);
    CHECK(make_codec(parse_codec_spec(spec))->spec() == make_codec(spec)->spec());
  }
  const CodecSettings s = parse_codec_spec("int4:chunk=256,stochastic,seed=9+zstd:level=5");
  CHECK(s.id == CodecId::int4);
  CHECK(s.quant.chunk == 256);
  CHECK(s.quant.stochastic);
  CHECK(s.quant.seed == 9);
  CHECK(s.zstd_level == 5);
  const CodecSettings q = parse_codec_spec("topk:ratio=0.02,bits=2,chunk=512");
  CHECK(q.id == CodecId::qtopk);
  CHECK(q.topk.bits == 2);
  CHECK(q.topk.chunk == 512);
  CHECK(q.topk.ratio == doctest::Approx(0.02));
  CHECK_FALSE(q.zstd_level.has_value());
  CHECK(parse_codec_spec("onebit:scale=rms").onebit_scale == OnebitScale::rms);
  CHECK(parse_codec_spec("topk").id == CodecId::topk);
  // The values are checked as make_codec checks them: a level the settings could hold is refused.
  CHECK_THROWS_WITH_AS(parse_codec_spec("onebit+zstd:level=0"),
                       doctest::Contains("level 0 is invalid"), InputError);
  CHECK_THROWS_WITH_AS(parse_codec_spec("int8:chunk=48"), doctest::Contains("chunk 48 is invalid"),
                       InputError);
  CHECK_THROWS_WITH_AS(parse_codec_spec("topk:ratio=1.5"),
                       doctest::Contains("ratio 1.5 is invalid"), InputError);
}
