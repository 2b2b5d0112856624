"""A large upload and its download stream: the server's peak memory hardly moves (tools/storage_memory.py,
which `make` users run with 200 MB)."""

from tools import storage_memory


def test_an_upload_and_its_download_stream():
    before, after_upload, after_download = storage_memory.main(80)
    assert after_upload - before < 30 and after_download - before < 40  # MB, for an 80 MB object
