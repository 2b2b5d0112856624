"""Image renditions (/render/image): an object resized with Pillow. Bounded so that no image can take
the service down: a source over MAX_SOURCE_PIXELS is refused from its header, before a pixel is
decoded (a decompression bomb, a 30,000 × 30,000 PNG); renditions are at most MAX_SIDE a side; and
at most RENDERS run at once, the others waiting up to WAIT seconds for their turn, then a 503."""

import io
import shutil
import tempfile
import threading
import warnings
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

from errors import Storage, invalid_request, storage_error
from values import whole_number

MAX_SOURCE_PIXELS = 25_000_000
MAX_SIDE = 2500
RENDERS = 2
WAIT = 10  # seconds
RESIZE = ("cover", "contain", "fill")
IMGPROXY_RESIZE = {"cover": "fill", "contain": "fit", "fill": "force"}
DEFAULT_QUALITY = 80
FORMATS = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp", "GIF": "image/gif"}

Image.MAX_IMAGE_PIXELS = MAX_SOURCE_PIXELS  # Pillow's own guard, for anything that opens images here
_turns = threading.BoundedSemaphore(RENDERS)


@dataclass(frozen=True)
class Transform:
    width: int | None = None
    height: int | None = None
    resize: str = "cover"
    quality: int | None = None  # as asked; None renders at DEFAULT_QUALITY

    def described(self):
        """The X-Transformations header Supabase Storage answers a rendition with (imgproxy's words:
        cover is `fill`, contain `fit`, fill `force`), or None when nothing was asked."""
        segments = [f"height:{self.height}"] if self.height else []
        segments += [f"width:{self.width}"] if self.width else []
        if self.width or self.height:
            segments.append(f"resizing_type:{IMGPROXY_RESIZE[self.resize]}")
        segments += [f"quality:{self.quality}"] if self.quality else []
        return ",".join(segments) or None


def transform(args):
    """width, height (1 to MAX_SIDE), resize (cover, contain, fill), quality (20 to 100) and format
    (only `origin`: the rendition keeps the source's format), from a query string or a signed token."""

    def number(name, low, high, default=None):
        value = args.get(name)
        if value in (None, ""):
            return default
        number = whole_number(value)
        if number is None or not low <= number <= high:
            raise invalid_request(f"{name} must be a whole number from {low} to {high}")
        return number

    resize = args.get("resize") or "cover"
    if resize not in RESIZE:
        raise invalid_request("resize must be cover, contain or fill")
    if (args.get("format") or "origin") != "origin":
        raise invalid_request("format must be origin")
    return Transform(
        number("width", 1, MAX_SIDE), number("height", 1, MAX_SIDE), resize, number("quality", 20, 100)
    )


def render(source, wanted):
    """(bytes, media type) of the image in the binary stream `source`, transformed."""
    if not _turns.acquire(timeout=WAIT):
        raise storage_error(503, Storage.UNAVAILABLE, "Too many images are being rendered, try again later")
    try:
        with _seekable(source) as file:
            return _render(file, wanted)
    finally:
        _turns.release()


class _seekable:
    """`source` itself when it can seek (a file on disk), else a temporary copy (an S3 stream)."""

    def __init__(self, source):
        self.source = source
        self.copy = None

    def __enter__(self):
        if getattr(self.source, "seekable", lambda: False)():
            return self.source
        self.copy = tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024)  # noqa: SIM115
        shutil.copyfileobj(self.source, self.copy)
        self.copy.seek(0)
        return self.copy

    def __exit__(self, *exc):
        if self.copy is not None:
            self.copy.close()
        return False


def _render(file, wanted):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(file)
            kind = image.format
            if kind not in FORMATS:
                raise invalid_request("Only JPEG, PNG, WebP and GIF images can be transformed")
            if image.width * image.height > MAX_SOURCE_PIXELS:
                raise _too_large()
            size = _target(image.size, wanted)
            if kind == "JPEG":
                image.draft("RGB", size)  # decode at a fraction of the size when that is enough
            image = ImageOps.exif_transpose(image)
            image = _resized(image, size, wanted.resize)
            out = io.BytesIO()
            options = {"quality": wanted.quality or DEFAULT_QUALITY} if kind in ("JPEG", "WEBP") else {}
            if kind == "JPEG" and image.mode not in ("RGB", "L"):
                image = image.convert("RGB")
            image.save(out, format=kind, **options)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise _too_large() from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        raise invalid_request("The object is not an image that can be transformed") from None
    return out.getvalue(), FORMATS[kind]


def _too_large():
    return storage_error(
        413, Storage.ENTITY_TOO_LARGE, f"The image exceeds {MAX_SOURCE_PIXELS} pixels", "Payload too large"
    )


def _target(size, wanted):
    """The rendition's size: the asked width and height, or the one asked and the other in
    proportion, or the source's own."""
    width, height = size
    if wanted.width and wanted.height:
        return wanted.width, wanted.height
    if wanted.width:
        return wanted.width, max(1, min(MAX_SIDE, round(height * wanted.width / width)))
    if wanted.height:
        return max(1, min(MAX_SIDE, round(width * wanted.height / height))), wanted.height
    return min(width, MAX_SIDE), min(height, MAX_SIDE)


def _resized(image, size, mode):
    if mode == "fill":
        return image.resize(size)
    if mode == "contain":
        return ImageOps.contain(image, size)
    return ImageOps.fit(image, size)
