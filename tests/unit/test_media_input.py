"""Media input: paths, URLs, bytes and Django files become one type; limits; image storage."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.files.base import ContentFile, File
from django.core.files.storage import storages
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.testapp.models import Upload
from turnkit_django.api.media import image_url, open_image, to_media
from turnkit_django.clients.media_input import sniff
from turnkit_django.exceptions import ConfigurationError, MediaError
from turnkit_django.messages import ImagePart
from turnkit_django.store.media import save_image
from turnkit_django.testing import PNG

pytestmark = pytest.mark.usefixtures("media_root")

PDF = b"%PDF-1.7\n%%EOF\n"
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 20
WEBP = b"RIFF\x24\x00\x00\x00WEBPVP8 " + b"\x00" * 20


def test_a_path_is_read_here_and_typed_by_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "photo.jpg"
    path.write_bytes(PNG)  # the extension lies; the bytes do not
    media = to_media(path)
    assert (media.data, media.mime_type, media.name, media.source) == (
        PNG, "image/png", "photo.jpg", "path")
    assert to_media(str(path)).data == PNG


def test_a_missing_path_or_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MediaError, match="is not a file"):
        to_media(tmp_path / "nope.png")
    with pytest.raises(MediaError, match="is not a file"):
        to_media(tmp_path)


def test_an_https_url_is_passed_on_without_downloading_and_its_secrets_are_not_described(
) -> None:
    media = to_media("https://user:pw@cdn.example.com:8443/a/photo.webp?sig=SECRET#x")
    assert (media.url, media.data, media.mime_type, media.source) == (
        "https://user:pw@cdn.example.com:8443/a/photo.webp?sig=SECRET#x", None, "image/webp",
        "url")
    assert media.describe() == {"name": "photo.webp", "mime_type": "image/webp",
                                "source": "url", "url": "https://cdn.example.com:8443/a/photo.webp"}
    with pytest.raises(MediaError, match="pass mime_type="):
        to_media("https://cdn.example.com/render?id=4")
    assert to_media("https://cdn.example.com/render?id=4", mime_type="image/png").is_image


@pytest.mark.parametrize("url", ["https://cdn.example.com:99999/p.png",
                                 "https://cdn.example.com:0/p.png",
                                 "https://cdn.example.com:http/p.png", "https:///p.png",
                                 "https://:443/p.png"])
def test_a_url_with_an_impossible_port_or_no_host_is_refused_before_anything_is_sent(
        url: str) -> None:
    with pytest.raises(MediaError, match=r"media URL .* (port|host)"):
        to_media(url)


def test_bytes_are_typed_by_their_signature_or_by_the_caller() -> None:
    assert [sniff(b) for b in (PNG, JPEG, WEBP, PDF, b"GIF89a..", b"plain")] == [
        "image/png", "image/jpeg", "image/webp", "application/pdf", "image/gif", None]
    assert to_media(bytearray(PDF)).is_pdf
    assert to_media((b"raw", "image/png")).mime_type == "image/png"
    assert to_media(b"raw", mime_type="image/png", name="x.png").name == "x.png"
    with pytest.raises(MediaError, match="pass mime_type="):
        to_media(b"no signature")
    assert to_media("data:image/png;base64,iVBORw0KGgo=").data.startswith(b"\x89PNG")


def test_an_upload_is_read_from_its_start_and_left_open_where_it_was() -> None:
    upload = SimpleUploadedFile("receipt.pdf", PDF, content_type="application/pdf")
    upload.seek(4)
    media = to_media(upload)
    assert (media.data, media.mime_type, media.name, media.source) == (
        PDF, "application/pdf", "receipt.pdf", "file")
    assert not upload.closed and upload.tell() == 4, "the application may still save it"


def test_an_upload_with_unknown_bytes_uses_its_content_type_then_its_name() -> None:
    assert to_media(SimpleUploadedFile("a.bin", b"xx", content_type="image/png")).is_image
    assert to_media(File(io.BytesIO(b"xx"), name="scan.pdf")).is_pdf


@pytest.mark.django_db
def test_a_filefield_file_is_opened_from_its_storage_and_closed_again(media_root: Path) -> None:
    saved = Upload.objects.create(file=SimpleUploadedFile("photo.png", PNG))
    upload = Upload.objects.get(pk=saved.pk)
    assert upload.file.closed
    media = to_media(upload.file)
    assert (media.data, media.name, media.mime_type) == (PNG, "photo.png", "image/png")
    assert upload.file.closed
    (media_root / upload.file.name).unlink()
    with pytest.raises(MediaError, match=r"cannot read media 'photo\.png'"):
        to_media(Upload.objects.get(pk=saved.pk).file)


def test_inputs_over_the_limit_are_refused_with_the_limit_named(tmp_path: Path) -> None:
    path = tmp_path / "big.png"
    path.write_bytes(PNG)
    for value in (path, PNG, ContentFile(PNG, name="big.png"), io.BytesIO(PNG)):
        with pytest.raises(MediaError, match=r"over the limit of 10 bytes: send a smaller"):
            to_media(value, mime_type="image/png", max_bytes=10)
    with pytest.raises(MediaError, match=rf"'big.png' is {len(PNG)} bytes, over the limit"):
        to_media(path, max_bytes=10)


def test_unusable_values_say_what_to_pass() -> None:
    with pytest.raises(MediaError, match="pass a path, an https URL, bytes with mime_type="):
        to_media(42)
    with pytest.raises(MediaError, match="binary mode"):
        to_media(io.StringIO("text"), mime_type="image/png")
    with pytest.raises(MediaError, match="either bytes or a URL"):
        to_media(type(to_media(PNG))(mime_type="image/png"))


def test_describe_never_holds_the_bytes() -> None:
    info = to_media(PNG, name="p.png").describe()
    assert info["size"] == len(PNG) and len(info["sha256"]) == 64
    assert PNG not in str(info).encode() and "data" not in info
    assert "data=" not in repr(to_media(PNG))


def test_generated_images_go_to_the_configured_storage(settings: Any, tmp_path: Path) -> None:
    settings.STORAGES = {**settings.STORAGES, "images": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(tmp_path / "images"), "base_url": "/img/"}}}
    settings.TURNKIT = {**settings.TURNKIT, "MEDIA_STORAGE": "images"}
    storages._storages.clear()
    alias, name = save_image(PNG, "image/png", turn_id="turn_1", image_id="img_1")
    assert (alias, name) == ("images", "turnkit/images/turn_1/img_1.png")
    assert (tmp_path / "images" / name).read_bytes() == PNG
    part = ImagePart(id="img_1", storage=alias, name=name)
    assert image_url(part) == "/img/turnkit/images/turn_1/img_1.png"
    with open_image(part) as handle:
        assert handle.read() == PNG
    assert image_url(ImagePart(id="img_2", url="https://x.example/i.png")) == (
        "https://x.example/i.png")


def test_an_unknown_storage_alias_is_a_configuration_error_and_a_system_check(
        settings: Any, tmp_path: Path) -> None:
    settings.TURNKIT = {**settings.TURNKIT, "MEDIA_STORAGE": "nowhere"}
    with pytest.raises(ConfigurationError, match=r"MEDIA_STORAGE'\] must be None or an alias of "
                       r"settings.STORAGES; got 'nowhere'"):
        save_image(PNG, "image/png", turn_id="t", image_id="i")
    assert [m.id for m in run_checks(tags=["turnkit"]) if m.id == "turnkit.E021"] == [
        "turnkit.E021"]
    # Adding the alias to STORAGES afterwards is seen: the setting is checked again.
    settings.STORAGES = {**settings.STORAGES, "nowhere": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(tmp_path)}}}
    assert save_image(PNG, "image/png", turn_id="t", image_id="i")[0] == "nowhere"
    assert not [m for m in run_checks(tags=["turnkit"]) if m.id == "turnkit.E021"]
