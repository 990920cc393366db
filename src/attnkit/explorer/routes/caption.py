"""``POST /api/caption``: one captioner's caption of a held-out test scene (``{"scene": index}``) or of an
uploaded PNG/JPEG (``{"image": base64 or a data: URL}``), JSON like every other route, so a web page of
another site cannot send one without the browser asking this server first (and it says no).

The image is bounded three times before it is decoded: the body limit (the guard), its bytes after base64
(``--max-upload-bytes``) and its pixels, read from its header (``--max-upload-pixels``); it is never
written to disk.
"""

from __future__ import annotations

import base64
import binascii
import io

import torch
from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from .. import schema
from ..api_errors import ERRORS, ApiError
from ..loading import checkpoint_fields
from ..payload import caption_payload, check_method
from ..state import client_of, explorer, run_light, served_model
from .catalog import scenes_of
from .translate import JOB_NAME, check_beam

__all__ = ["CaptionRequest", "decode_image", "router"]

router = APIRouter()


class CaptionRequest(BaseModel):
    scene: int | None = Field(None, description="index of a held-out test scene (see /api/scenes)")
    image: str | None = Field(
        None, description="a PNG or JPEG file in base64 (a data: URL is fine), at most --max-upload-bytes"
    )
    model: str | None = Field(None, description="a loaded captioner's name (default: the first)")
    beam: int = Field(1, ge=1, description="beam size (1 = greedy), at most --max-beam")
    method: str | None = Field(None, description="an attribution method whose maps fill 'attribution'")
    job: str | None = Field(None, pattern=JOB_NAME, description="follow the work at /api/progress/{job}")


def decode_image(data: bytes, canvas: int, max_pixels: int) -> torch.Tensor:
    """Upload bytes → the captioner's ``(1, canvas, canvas)`` input, converted as ``attnkit caption`` does."""
    from PIL import Image, UnidentifiedImageError

    from ...tasks.captioning.data import image_to_canvas

    try:
        with Image.open(io.BytesIO(data)) as im:  # reads the header only; pixels are decoded below
            if im.format not in ("PNG", "JPEG"):
                raise ApiError(415, f"the upload is a {im.format} image; send a PNG or JPEG")
            if im.width * im.height > max_pixels:
                raise ApiError(
                    413,
                    f"the image is {im.width}×{im.height} pixels; the limit is {max_pixels} pixels "
                    "(--max-upload-pixels; the captioner reads a small canvas anyway)",
                )
            return image_to_canvas(im, canvas)
    except Image.DecompressionBombError:
        raise ApiError(413, f"the image has far more than {max_pixels} pixels, the limit") from None
    except (UnidentifiedImageError, OSError, SyntaxError):
        raise ApiError(415, "the upload is not an image: send a PNG or JPEG file") from None


def _image_bytes(text: str, limit: int) -> bytes:
    b64 = text.split(",", 1)[1] if text.startswith("data:") else text
    if len(b64) > limit * 4 // 3 + 4:
        raise ApiError(413, f"the image has more than {limit} bytes, the limit (--max-upload-bytes)")
    try:
        data = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, "the image is not base64: send the file's bytes in base64, or a data: URL") from None
    if len(data) > limit:
        raise ApiError(413, f"the image has {len(data)} bytes; the limit is {limit} (--max-upload-bytes)")
    return data


@router.post("/api/caption", response_model=schema.Caption, responses=ERRORS)
async def caption(req: CaptionRequest, request: Request):
    """Caption an uploaded PNG/JPEG (``"image"``, base64) or a held-out test scene (``"scene"``, which adds
    its boxes and the attention correctness of each item word)."""
    ex = explorer(request)
    o = ex.options
    if (req.scene is None) == (req.image is None):
        raise ApiError(422, 'give one of "scene" (a test scene\'s index) or "image" (a PNG or JPEG in base64)')
    check_beam(req.beam, o.max_beam)
    name, cm, spec = await served_model(request, ex.models.captioners, req.model, "captioning")
    method = check_method(cm, req.method, "a captioner") if req.method is not None else None
    if req.image is not None:
        data = _image_bytes(req.image, o.max_upload_bytes)
        kwargs = {"image": await run_in_threadpool(decode_image, data, cm.canvas, o.max_upload_pixels)}
    else:
        scenes = await run_in_threadpool(scenes_of, ex)
        if not 0 <= req.scene < len(scenes):
            raise ApiError(
                404, f"scene {req.scene} does not exist; there are {len(scenes)} test scenes (0..{len(scenes) - 1})"
            )
        item = scenes[req.scene]
        kwargs = {"image": item["image"], "scene": item}
    kwargs.update(beam=req.beam, method=method)
    if method is not None or req.beam > o.heavy_beam:
        client = client_of(request)
        return await ex.jobs.run(client, req.job, "captioning", name, kwargs, request.is_disconnected, spec=spec)
    return {**await run_light(request, caption_payload, cm, model=name, **kwargs), **checkpoint_fields(spec)}
