"""ferroload-codec: image, audio and video decoding into numpy arrays, fast.

- Images: `decode_image`, `decode_images`, `ImageDecoder` (uint8 HWC/NHWC; JPEG via
  libjpeg-turbo with DCT-domain scaling, PNG via libspng, the rest via Pillow; OpenCV
  SIMD resizing straight into the caller's buffer; batches on a thread pool).
- Audio: `decode_audio`, `AudioDecoder` (soundfile + soxr).
- Video: `decode_video`, `video_info` (PyAV, with the `video` extra).
- `backends()` tells which accelerations are active.

Depends on no other ferroload package (only ferroload-core, for `FerroloadError`), and
imports none of its optional libraries until they are used.
"""

from importlib.metadata import PackageNotFoundError, version

from ferroload_codec._audio import (
    DEFAULT_MAX_SAMPLES,
    AudioDecoder,
    DecodedAudioBatch,
    decode_audio,
)
from ferroload_codec._backends import backends, preload
from ferroload_codec._errors import (
    AudioTooLongError,
    CodecUnavailableError,
    DecodeError,
    ImageTooLargeError,
    UnsupportedFormatError,
)
from ferroload_codec._image import (
    DEFAULT_MAX_PIXELS,
    DecodedBatch,
    ImageDecoder,
    ImageInfo,
    image_info,
)
from ferroload_codec._image_funcs import decode_image, decode_images
from ferroload_codec._video import VideoInfo, decode_video, video_info

try:
    __version__ = version("ferroload-codec")
except PackageNotFoundError:  # pragma: no cover  (running from a source tree)
    __version__ = "0.0.0"

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "DEFAULT_MAX_SAMPLES",
    "AudioDecoder",
    "AudioTooLongError",
    "CodecUnavailableError",
    "DecodeError",
    "DecodedAudioBatch",
    "DecodedBatch",
    "ImageDecoder",
    "ImageInfo",
    "ImageTooLargeError",
    "UnsupportedFormatError",
    "VideoInfo",
    "__version__",
    "backends",
    "decode_audio",
    "decode_image",
    "decode_images",
    "decode_video",
    "image_info",
    "preload",
    "video_info",
]
