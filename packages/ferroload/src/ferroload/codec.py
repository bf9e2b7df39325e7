"""`ferroload.codec`: image, audio and video decoding (the `ferroload_codec` package).

>>> import ferroload.codec
>>> ferroload.codec.decode_image is ferroload.codec.ferroload_codec.decode_image
True
"""

import ferroload_codec
from ferroload_codec import *  # noqa: F403  (the whole public API, by design)

__all__ = [*ferroload_codec.__all__, "ferroload_codec"]
