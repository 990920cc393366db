"""``attnkit caption``."""

from __future__ import annotations

from pathlib import Path

from ..pretrained import DEFAULT_CAPTION_MODEL
from .common import CLIError, _open_model, _output, _shown_name
from .flags import _add_beam_flag, _add_device_flags, _add_html_flag, _add_model_flag, _add_plot_flag


def cmd_caption(args) -> None:
    import torch

    from ..tasks.captioning import load_image_file

    _output(args.plot, "--plot")
    _output(args.html, "--html")
    from ..service import ModelKind

    model = _open_model(args, DEFAULT_CAPTION_MODEL, kind=ModelKind.CAPTIONER)
    cm = model.impl
    images = []
    for f in args.images:
        try:
            images.append(load_image_file(f, cm.canvas))
        except (FileNotFoundError, ValueError) as exc:
            raise CLIError(str(exc)) from None
    batch = torch.stack(images)
    greedy = cm.caption(batch, beam_size=1)
    beam = cm.caption(batch, beam_size=args.beam) if args.beam > 1 else greedy
    for f, g, b in zip(args.images, greedy, beam):
        print(f"{f}")
        print(f"  greedy:    {g.caption}")
        if args.beam > 1:
            print(f"  beam {args.beam:<4} {b.caption}")
    if args.plot is not None:
        if len(args.images) == 1:
            out = cm.plot(batch[0], beam[0], args.plot)
            print(f"wrote {out}")
        else:
            stem = Path(args.plot)
            for k, (f, r) in enumerate(zip(args.images, beam)):
                path = stem.with_name(f"{stem.stem}-{k + 1}{stem.suffix or '.png'}")
                title = f"{Path(f).name}: {r.caption}"
                print(f"wrote {cm.plot(batch[k], r, path, title=title)}")
    if args.html is not None:
        from ..explorer import caption_payload, write_explorer_html

        name = _shown_name(model)
        payloads = [caption_payload(cm, img, model=name, beam=args.beam) for img in batch]
        print(f"wrote {write_explorer_html(args.html, captions=payloads)}")


def add_parser(sub) -> None:
    ca = sub.add_parser("caption", help="caption images with a Show, Attend and Tell model")
    ca.add_argument(
        "images", nargs="+", help="image files (any size/colour mode; converted to the model's grayscale canvas)"
    )
    _add_model_flag(ca, DEFAULT_CAPTION_MODEL)
    _add_beam_flag(ca, 3, "beam size for the second caption, 1 = greedy only")
    _add_plot_flag(ca, "write the per-word attention overlay grid")
    _add_html_flag(ca, "these captions")
    _add_device_flags(ca)
    ca.set_defaults(func=cmd_caption)
