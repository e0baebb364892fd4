"""Tool bases for media: ``ImageTool`` paints, ``ViewMediaTool`` analyses; ``PaintImage``.

Subclass them, set the class attributes, and override the hooks you need::

    class Banner(ImageTool):
        \"\"\"Draw a banner for the campaign.\"\"\"
        model = "gpt-image-1"; size = "1536x1024"

    class InspectUpload(ViewMediaTool):
        \"\"\"Look at a photo the customer uploaded.\"\"\"
        class Args(BaseModel):
            upload_id: int
        objective_text = "Is the item damaged? Where?"
        def media(self, ctx, args):
            return Upload.objects.get(pk=args.upload_id).file

Attributes: ``model``, ``provider`` (``"openai"`` / ``"anthropic"``), ``client`` (a media client;
by default the agent's client when it supports the operation), ``params`` (sent to the provider
as they are), ``max_bytes``; ``size`` for images, ``output_schema`` for analyses. Hooks:
``prompt``, ``input_images``, ``mask``, ``metadata`` (ImageTool); ``media``, ``objective``,
``metadata`` (ViewMediaTool). What the model gets back is ids, types and text, never bytes,
URLs or storage names. The default ``ViewMediaTool.media`` takes only https URLs from the model:
map your own arguments to files in an override, never model-written paths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from ..base.serialization import JsonMapping, JsonObject
from ..clients._http import members
from ..clients.media import ImageResult, MediaAnalysis, MediaInput, web_url
from ..clients.media_input import MAX_MEDIA_ITEMS, to_media
from ..exceptions import ConfigurationError, MediaError, ToolError
from ..messages import ImagePart, MessageKind, load_parts
from ..models import Message
from ..store.media import open_image
from .tool import Tool, ToolContext

#: How many of a conversation's newest image messages ``PaintImage`` searches for a reference.
REFERENCE_WINDOW = 200


class ImageArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(description="A precise description of the image to make.")


class ImageTool(Tool):
    """Base class of tools that generate or edit images through ``ctx.turn.paint``."""

    Args: type[BaseModel] = ImageArgs
    model: str | None = None
    provider: str | None = None
    size: str | None = None
    #: A client with ``supports_paint``; None: the agent's client.
    client: object = None
    params: JsonObject = {}
    max_bytes: int | None = None

    # The hooks take ``args``, an instance of ``Args`` (subclasses annotate it so).

    def prompt(self, ctx: ToolContext, args: Any) -> str:
        return str(args.prompt)

    def input_images(self, ctx: ToolContext, args: Any) -> Sequence[object]:
        """Images to edit (anything ``to_media`` takes); none by default: generate."""
        return []

    def mask(self, ctx: ToolContext, args: Any) -> object:
        return None

    def metadata(self, ctx: ToolContext, args: Any) -> JsonMapping:
        return {}

    def call(self, ctx: ToolContext, args: Any) -> JsonObject:
        image = ctx.turn.paint(
            self.prompt(ctx, args), model=self.model, provider=self.provider, size=self.size,
            input_images=list(self.input_images(ctx, args)), mask=self.mask(ctx, args),
            params=dict(self.params), metadata=self.metadata(ctx, args), client=self.client,
            max_bytes=self.max_bytes,
        )
        return image_result(ctx, image)


def image_result(ctx: ToolContext, image: ImageResult) -> JsonObject:
    """What the model gets back from a painting tool: ids and types, never bytes or URLs."""
    return {"conversation_id": ctx.conversation_id, "image_message_id": image.message_id,
            "images": [{"id": i.id, "mime_type": i.mime_type, "revised_prompt": i.revised_prompt}
                       for i in image.images],
            "model": image.model, "size": image.size}


class ViewMediaArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(description="The https URL of an image or a PDF.")
    objective: str = Field(description="What to find out from it.")


class ViewMediaTool(Tool):
    """Base class of tools that analyse images and PDFs through ``ctx.turn.view_media``.

    Read-only and replay-safe: an analysis changes nothing, and a replay returns the recorded one.
    """

    Args: type[BaseModel] = ViewMediaArgs
    read_only = True
    recovery = "replay_safe"
    model: str | None = None
    provider: str | None = None
    #: A client with ``supports_view_media``; None: the agent's client.
    client: object = None
    #: A pydantic class or a JSON schema for the analysis's ``data``.
    output_schema: type[BaseModel] | JsonObject | None = None
    params: JsonObject = {}
    max_bytes: int | None = None
    #: The objective when the arguments carry none.
    objective_text: str = ""

    def media(self, ctx: ToolContext, args: Any) -> object:
        """What to analyse; by default the model's ``url``, which must be https."""
        url = str(getattr(args, "url", ""))
        if urlsplit(url).scheme != "https":
            raise ToolError("pass the https URL of an image or a PDF")
        try:
            return web_url(url)
        except MediaError as exc:  # no host, or a port no server listens on
            raise ToolError(f"{exc}; pass the https URL of an image or a PDF") from None

    def objective(self, ctx: ToolContext, args: Any) -> str:
        return str(getattr(args, "objective", "") or self.objective_text)

    def metadata(self, ctx: ToolContext, args: Any) -> JsonMapping:
        return {}

    def call(self, ctx: ToolContext, args: Any) -> JsonObject:
        analysis = ctx.turn.view_media(
            self.media(ctx, args), objective=self.objective(ctx, args),
            output_schema=self.output_schema, model=self.model, provider=self.provider,
            params=dict(self.params), metadata=self.metadata(ctx, args), client=self.client,
            max_bytes=self.max_bytes,
        )
        return analysis_result(ctx, analysis)


def analysis_result(ctx: ToolContext, analysis: MediaAnalysis) -> JsonObject:
    """What the model gets back from an analysing tool: the findings and what was looked at."""
    return {"conversation_id": ctx.conversation_id, "analysis_message_id": analysis.message_id,
            "text": analysis.text, "data": analysis.data,
            "media": [{k: m.get(k) for k in ("name", "mime_type", "size")}
                      for m in analysis.media]}


# --------------------------------------------------------------------------- paint_image


class PaintArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(description="A precise description of the image to make.")
    reference_images: list[str] = Field(
        default_factory=list, max_length=MAX_MEDIA_ITEMS,
        description="Ids (img_...) of earlier images of this conversation to edit or build on.")
    mask: str | None = Field(
        None, description="Id of an image whose transparent areas mark where to edit the first "
                          "reference image.")


#: ``gate(**request) -> True`` allows one paid generation; anything else refuses it.
Gate = Callable[..., object]
#: ``resolve(reference, ctx) -> media``: what a model-given reference stands for.
Resolver = Callable[[str, ToolContext], object]


class PaintImage(ImageTool):
    """Make an image from a prompt, optionally editing earlier images. Ends the turn."""

    name = "paint_image"
    Args = PaintArgs

    def __init__(self, *, gate: Gate, model: str, provider: str | None = None,
                 client: object = None, size: str | None = None,
                 max_reference_images: int | None = None, resolve: Resolver | None = None,
                 params: JsonObject | None = None) -> None:
        if not callable(gate):
            raise ConfigurationError("paint_image needs gate=, a callable that returns True to "
                                     "allow each paid generation")
        if max_reference_images is not None and (
                not isinstance(max_reference_images, int) or isinstance(max_reference_images, bool)
                or not 0 <= max_reference_images <= MAX_MEDIA_ITEMS):
            raise ConfigurationError(f"max_reference_images must be a whole number from 0 to "
                                     f"{MAX_MEDIA_ITEMS} (at most {MAX_MEDIA_ITEMS} input images "
                                     f"in one edit), or None")
        for option, value in (("size", size), ("image_provider", provider)):
            if value is not None and not isinstance(value, str):
                raise ConfigurationError(f"paint_image {option} must be a str such as "
                                         f"'1024x1024' / 'openai', or None; got {value!r}")
        if params is not None and not isinstance(params, dict):
            raise ConfigurationError(f"paint_image image_params must be a dict of provider "
                                     f"parameters, or None; got {params!r}")
        if resolve is not None and not callable(resolve):
            raise ConfigurationError(f"paint_image resolve_reference must be a callable "
                                     f"(reference, ctx), or None; got {resolve!r}")
        self.gate = gate
        self.model = model
        self.provider = provider
        self.client = client
        self.size = size
        self.max_reference_images = max_reference_images
        self.resolve = resolve or conversation_image
        self.params = dict(params or {})
        self.terminal = _completion

    def call(self, ctx: ToolContext, args: PaintArgs) -> JsonObject:
        references = list(args.reference_images)
        cap = self.max_reference_images
        if cap is not None and len(references) > cap:
            raise ToolError(f"at most {cap} reference images are allowed; got {len(references)}")
        if args.mask is not None and not references:
            raise ToolError("a mask needs a reference image to edit")
        allowed = self.gate(
            prompt=args.prompt, reference_images=references, mask=args.mask, model=self.model,
            size=self.size, conversation_id=ctx.conversation_id, turn_id=ctx.turn.id,
            tool_call_id=ctx.tool_call_id, principal=ctx.principal,
        )
        if allowed is not True:  # the literal True: a truthy "yes" is not consent to pay
            raise ToolError("the application did not allow this image generation; nothing "
                            "was generated")
        image = ctx.turn.paint(
            args.prompt, model=self.model, provider=self.provider, size=self.size,
            input_images=[self.resolve(ref, ctx) for ref in references],
            mask=None if args.mask is None else self.resolve(args.mask, ctx),
            params=dict(self.params), client=self.client, max_bytes=self.max_bytes,
            metadata={"reference_images": references, "mask": args.mask},
        )
        return image_result(ctx, image)


def _completion(result: JsonObject) -> str:
    ids = ", ".join(str(i["id"]) for i in members(result.get("images")))
    return f"Generated image {ids} (message {result.get('image_message_id')})."


def conversation_image(reference: str, ctx: ToolContext) -> MediaInput | str | None:
    """Resolve an image id of this conversation to its stored bytes, or its URL."""
    rows = (Message.objects.filter(conversation_id=ctx.conversation_id, kind=MessageKind.IMAGE)
            .order_by("-sequence").values_list("content", flat=True)[:REFERENCE_WINDOW])
    for content in rows:
        for part in load_parts(content):
            if isinstance(part, ImagePart) and part.id == reference:
                if part.storage and part.name:
                    with open_image(part) as handle:
                        return to_media(handle.read(), mime_type=part.mime_type,
                                        name=part.name.rsplit("/", 1)[-1])
                if part.url is None:
                    return None
                try:  # a URL, never a path on this server, whatever the provider returned
                    return to_media(web_url(part.url), mime_type=part.mime_type)
                except MediaError as exc:
                    raise ToolError(f"image {reference!r} cannot be used: {exc}") from None
    raise ToolError(f"no image {reference!r} in this conversation; use the id (img_...) of an "
                    "image generated here")


__all__ = ["ImageTool", "PaintImage", "ViewMediaTool", "analysis_result", "conversation_image",
           "image_result"]
