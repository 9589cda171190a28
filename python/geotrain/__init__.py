"""geotrain from Python: the C++ core's codecs and region leader, for PyTorch users.

    import geotrain
    codec = geotrain.Codec("onebit")          # any spec a geotrain config takes
    payload = codec.encode(x)                 # x: float32 NumPy array or CPU torch tensor
    codec.decode(payload, out)                # writes into out's memory

    from geotrain.torch import OuterSync      # a region's leader: see docs/python.md

The extension module geotrain._core binds the C++ library; nothing here reimplements it.
"""

from geotrain._core import (  # noqa: F401
    Codec,
    ErrorFeedback,
    HandshakeError,
    RegionSync,
    __version__,
    built_with_cuda,
    decode,
    payload_header,
    standard_codec_specs,
)

__all__ = [
    "Codec",
    "ErrorFeedback",
    "HandshakeError",
    "RegionSync",
    "__version__",
    "built_with_cuda",
    "decode",
    "payload_header",
    "standard_codec_specs",
]
