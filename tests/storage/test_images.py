"""/render/image: objects resized with Pillow (public, authenticated, signed), and the images that
must not take the service down: a 30,000 × 30,000 PNG is refused from its header."""

import io
import struct
import zlib

import pytest
from PIL import Image

from support import assert_storage_error

RENDER = "/storage/v1/render/image"


def picture(kind="PNG", size=(400, 300)):
    out = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(out, format=kind)
    return out.getvalue()


def bomb(width=30_000, height=30_000):
    """A PNG whose header claims width × height pixels, in a few hundred bytes."""

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0" * 1000))
        + chunk(b"IEND", b"")
    )


def size_of(response):
    assert response.status_code == 200, response.get_data(as_text=True)
    return Image.open(io.BytesIO(response.data)).size


@pytest.fixture
def tables_config(tmp_path):
    path = tmp_path / "tables.toml"
    path.write_text('[buckets.pics]\npublic = true\nallowed_mime_types = ["image/*", "text/plain"]\n')
    return path


@pytest.fixture
def images(service):
    service.post("/storage/v1/object/pics/p.png", data=picture(), headers={"Content-Type": "image/png"})
    service.post(
        "/storage/v1/object/pics/j.jpg", data=picture("JPEG"), headers={"Content-Type": "image/jpeg"}
    )
    return service


@pytest.mark.parametrize(
    ("query", "size"),
    [("width=100", (100, 75)), ("height=150", (200, 150)), ("width=100&height=100", (100, 100)),
     ("width=100&height=100&resize=contain", (100, 75)), ("width=50&height=100&resize=fill", (50, 100)),
     ("", (400, 300))],
)  # fmt: skip
def test_renditions(images, browser, query, size):
    assert size_of(browser.get(f"{RENDER}/public/pics/p.png?{query}")) == size
    jpeg = images.get(f"{RENDER}/authenticated/pics/j.jpg?{query}&quality=50")
    assert size_of(jpeg) == size and jpeg.mimetype == "image/jpeg"


def test_a_signed_rendition_keeps_its_transformation(images, browser):
    signed = images.post(
        "/storage/v1/object/sign/pics/p.png", json={"expiresIn": 60, "transform": {"width": 40}}
    )
    url = signed.json["signedURL"]
    assert url.startswith("/render/image/sign/pics/p.png?token=")
    assert size_of(browser.get(f"/storage/v1{url}&width=400")) == (40, 30)


@pytest.mark.parametrize(
    ("query", "described"),
    [("width=200&height=200&quality=60", "height:200,width:200,resizing_type:fill,quality:60"),
     ("width=100&resize=contain", "width:100,resizing_type:fit"),
     ("height=50&resize=fill", "height:50,resizing_type:force"),
     ("quality=90", "quality:90"), ("format=origin", None), ("", None)],
)  # fmt: skip
def test_a_rendition_says_what_was_done_as_supabase_does(images, browser, query, described):
    """X-Transformations: imgproxy's words for what was asked, on every kind of rendition."""
    public = browser.get(f"{RENDER}/public/pics/p.png?{query}")
    authenticated = images.get(f"{RENDER}/authenticated/pics/j.jpg?{query}")
    for answer in (public, authenticated):
        assert answer.status_code == 200 and answer.headers.get("X-Transformations") == described
    transform = dict(pair.split("=") for pair in query.split("&") if pair)
    signed = images.post("/storage/v1/object/sign/pics/p.png", json={"expiresIn": 60, "transform": transform})
    got = browser.get(f"/storage/v1{signed.json['signedURL']}")
    assert got.status_code == 200 and got.headers.get("X-Transformations") == described


@pytest.mark.parametrize(
    "query", ["width=0", "width=3000", "width=x", "resize=crop", "quality=5", "format=webp"]
)
def test_bad_transformations_are_400s(images, query):
    assert_storage_error(images.get(f"{RENDER}/authenticated/pics/p.png?{query}"), 400)


def test_images_that_would_take_the_service_down_are_refused(service):
    service.post("/storage/v1/object/pics/bomb.png", data=bomb(), headers={"Content-Type": "image/png"})
    assert_storage_error(service.get(f"{RENDER}/authenticated/pics/bomb.png?width=10"), 413, "EntityTooLarge")
    service.post(
        "/storage/v1/object/pics/t.txt", data=b"not an image", headers={"Content-Type": "text/plain"}
    )
    assert_storage_error(service.get(f"{RENDER}/authenticated/pics/t.txt?width=10"), 400)
    service.post(
        "/storage/v1/object/pics/cut.png", data=picture()[:100], headers={"Content-Type": "image/png"}
    )
    assert_storage_error(service.get(f"{RENDER}/authenticated/pics/cut.png?width=10"), 400)
    assert_storage_error(service.get(f"{RENDER}/other/pics/p.png"), 404)
