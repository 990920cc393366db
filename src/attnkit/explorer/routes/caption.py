"""``POST /api/caption``: one captioner's caption of a held-out test scene (``{"scene": index}``) or of an
uploaded PNG/JPEG (``{"image": base64 or a data: URL}``), JSON like every other route, so a web page of
another site cannot send one without the browser asking this server first (and it says no).

The image is bounded four times before it is decoded: the body limit (the guard), its bytes after base64
(``--max-upload-bytes``), its pixels, read from its header (``--max-upload-pixels``), and the bytes its
decode holds (``--max-decode-bytes``: pixels times bytes per pixel, at the reduced scale a JPEG is decoded
at). It is reduced to a few canvases strip by strip, at most ``--max-decodes`` uploads are decoded at once,
and the memory is given back to the system after each (:mod:`..memory`). It is never written to disk.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io

import torch
from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from ...service import CaptionAnalysis, ModelKind, analyse, check_method
from ...service import CaptionRequest as CaptionJob
from .. import schema
from ..api_errors import ERRORS, ApiError
from ..memory import give_back
from ..payload import caption_answer
from ..state import client_of, explorer, run_light, served, served_model
from .catalog import scenes_of
from .translate import JOB_NAME, check_beam

__all__ = ["CaptionRequest", "caption_reply", "decode_image", "router"]

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


#: bytes PIL keeps per pixel of a decoded image, by mode (every mode not named: 4)
_PIXEL_BYTES = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16L": 2, "I;16B": 2, "I;16N": 2}
_STRIP_BYTES = 4 << 20  # what one strip of the reduction converts at a time
GAP = 4  # reduced to at least this many canvases a side; the bilinear resize to the canvas does the rest


def decode_image(data: bytes, canvas: int, max_pixels: int, max_bytes: int | None = None) -> torch.Tensor:
    """Upload bytes → the captioner's ``(1, canvas, canvas)`` input, converted as ``attnkit caption`` does
    (grayscale, transparency on black, resized to the canvas), at a bounded cost: the pixels (header) and the
    bytes of the decode (``max_bytes``: pixels × bytes per pixel) are checked before a pixel is decoded, a JPEG
    is decoded at the smallest scale that still covers the canvas (``Image.draft``), and a large image is
    reduced to a few canvases strip by strip (:func:`_reduced`), so only the decode itself is
    ever held at full size, as uint8."""
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
            if im.format == "JPEG":  # libjpeg scales by 1/2, 1/4 or 1/8 as it decodes (and writes gray directly)
                im.draft("L" if im.mode in ("L", "RGB") else None, (GAP * canvas, GAP * canvas))
            cost = im.width * im.height * _PIXEL_BYTES.get(im.mode, 4)
            if max_bytes is not None and cost > max_bytes:
                raise ApiError(
                    413,
                    f"the image is {im.width}×{im.height} pixels in mode {im.mode}: {cost} bytes decoded; the limit "
                    f"is {max_bytes} bytes (--max-decode-bytes)",
                )
            im.load()
            return image_to_canvas(_reduced(im, canvas), canvas)
    except Image.DecompressionBombError:
        raise ApiError(413, f"the image has far more than {max_pixels} pixels, the limit") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        raise ApiError(415, "the upload is not an image: send a PNG or JPEG file") from None


def _reduced(im, canvas: int):
    """``im`` reduced by whole factors to between GAP and 2 GAP canvases a side (box averages), converted a strip
    of rows at a time so no full-size copy is made: grayscale (``L``), or, with transparency, premultiplied
    RGB (colour times alpha: the image on black, as :func:`image_to_canvas` composites it). A small image is
    returned as it is."""
    from PIL import Image

    fx, fy = max(1, im.width // (GAP * canvas)), max(1, im.height // (GAP * canvas))
    if (fx, fy) == (1, 1):
        return im
    alpha = im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (im.mode == "P" and "transparency" in im.info)
    rows = fy * max(1, _STRIP_BYTES // (4 * im.width * fy))  # a whole number of reduction blocks
    parts = []
    for y in range(0, im.height, rows):
        strip = im.crop((0, y, im.width, min(im.height, y + rows)))
        strip = strip.convert("RGBA").convert("RGBa") if alpha else strip.convert("L")
        parts.append(strip.reduce((fx, fy)))  # RGBa: averaged as it is, premultiplied
    out = Image.new(parts[0].mode, (parts[0].width, sum(p.height for p in parts)))
    y = 0
    for p in parts:
        out.paste(p, (0, y))
        y += p.height
    if alpha:  # the premultiplied colour bands are the image composited on black
        return Image.merge("RGB", out.split()[:3])
    return out


def _image_bytes(text: str, limit: int) -> bytes:
    if text.startswith("data:"):
        _, comma, b64 = text.partition(",")
        if not comma:
            raise ApiError(400, "the image is a data: URL without a comma: send 'data:image/png;base64,' and the data")
    else:
        b64 = text
    if len(b64) > limit * 4 // 3 + 4:
        raise ApiError(413, f"the image has more than {limit} bytes, the limit (--max-upload-bytes)")
    try:
        data = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, "the image is not base64: send the file's bytes in base64, or a data: URL") from None
    if len(data) > limit:
        raise ApiError(413, f"the image has {len(data)} bytes; the limit is {limit} (--max-upload-bytes)")
    return data


def _decode_slots(ex) -> asyncio.Semaphore:
    with ex.lock:
        return ex.cache.setdefault("decode_slots", asyncio.Semaphore(ex.options.max_decodes))


async def _decoded(ex, req: CaptionRequest, canvas: int) -> torch.Tensor:
    """The upload decoded in a thread, at most ``--max-decodes`` at once (the others wait their turn here, in
    the event loop, holding no thread); its memory is given back to the system when it is done."""
    o = ex.options
    async with _decode_slots(ex):
        try:
            data = _image_bytes(req.image, o.max_upload_bytes)
            req.image = None  # the base64 text goes as soon as nothing refers to it
            return await run_in_threadpool(decode_image, data, canvas, o.max_upload_pixels, o.max_decode_bytes)
        finally:
            data = None
            await run_in_threadpool(give_back)


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
        ask = CaptionJob(await _decoded(ex, req, cm.canvas), beam=req.beam, method=method)
    else:
        scenes = await run_in_threadpool(scenes_of, ex)
        if not 0 <= req.scene < len(scenes):
            raise ApiError(
                404, f"scene {req.scene} does not exist; there are {len(scenes)} test scenes (0..{len(scenes) - 1})"
            )
        item = scenes[req.scene]
        ask = CaptionJob(item["image"], beam=req.beam, scene=item, method=method)
    if method is not None or req.beam > o.heavy_beam:
        client = client_of(request)
        analysis = await ex.jobs.run(client, req.job, name, ask, request.is_disconnected, spec=spec)
        return await run_in_threadpool(caption_reply, analysis)
    model = served(name, ModelKind.CAPTIONER, cm, spec)
    return await run_light(request, lambda: caption_reply(analyse(model, ask)))


def caption_reply(analysis: CaptionAnalysis) -> schema.Caption:
    """The answer to ``/api/caption``: :func:`~attnkit.explorer.payload.caption_answer` of the analysis (with a
    training run's checkpoint, ``checkpoint`` and ``step``, of the model it was made with)."""
    return caption_answer(analysis)
