"""Each family's media as its release processes it: frames resized once, straight from the source, to the
size the family's processor takes (Qwen3-VL's 32-px grid, LLaVA-OneVision's and InternVL3's tiles), the
size known without decoding (``frame_size``), Qwen2/2.5-VL's media unchanged, and every output naming it."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from paths import CONF
from PIL import Image

from core.decoding import MediaSpec, decode_clip, frame_size, resize_to, smart_resize
from core.media import load_image
from core.video_io import write_mp4

SOURCE_SIZES = [(720, 1280), (480, 640), (360, 480), (96, 320), (48, 64)]
MEDIA = sorted(path.stem for path in (CONF / "media").glob("*.yaml"))
REAL_MODELS = {
    "qwen2_vl_7b": "qwen_64f",
    "qwen2_5_vl_7b": "qwen_64f",
    "qwen3_vl_8b": "qwen3_vl_64f",
    "llava_onevision_7b": "llava_onevision_64f",
    "internvl_8b": "internvl_64f",
}


def _noise(frames: int, height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (frames, height, width, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def shipped(compose) -> dict[str, MediaSpec]:
    """Every shipped media config (``media=<name>``), composed once."""
    return {name: compose("train", f"media={name}").media for name in MEDIA}


@pytest.fixture(scope="module")
def of_model(compose) -> dict[str, MediaSpec]:
    """The media each real model config composes (``model=<name>``), once."""
    return {model: compose("train", f"model={model}").media for model in REAL_MODELS}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """A 2-frame video and a still image of each source size: {(h, w): (video path, image path)}."""
    root = tmp_path_factory.mktemp("sources")
    made = {}
    for height, width in SOURCE_SIZES:
        frames = _noise(2, height, width, seed=height + width)
        video, image = root / f"{height}x{width}.mp4", root / f"{height}x{width}.png"
        write_mp4(video, frames, fps=2.0)
        Image.fromarray(frames[0]).save(image)
        made[height, width] = (video, image)
    return made


def test_every_real_model_composes_its_familys_media(compose, shipped, of_model):
    for model, media in REAL_MODELS.items():
        assert of_model[model] == shipped[media], model
    assert compose("eval", "model=qwen3_vl_8b").media == shipped["qwen3_vl_64f"]


def test_qwen3_vl_frames_are_multiples_of_32_that_its_released_processor_keeps(of_model):
    """Qwen3-VL's frames went to multiples of 28 (252 x 448 from 720p), then its processor resized them
    again to multiples of 32 (256 x 448). Now they are sized once as qwen_vl_utils sizes them for 16-px
    patches (224 x 448), and the released processors' patch grids are exactly the frames' size / 16."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    spec = of_model["qwen3_vl_8b"]
    # Qwen3-VL-8B-Instruct's preprocessor settings (released-shapes.md); 16-px patches.
    video_processor = Qwen3VLVideoProcessor(
        size={"shortest_edge": 4096, "longest_edge": 25165824}, patch_size=16, cap_pixels_per_frame=True
    )
    image_processor = Qwen2VLImageProcessor(
        size={"shortest_edge": 65536, "longest_edge": 16777216}, patch_size=16
    )
    assert frame_size(spec, 720, 1280, image=False) == (224, 448)
    for height, width in SOURCE_SIZES:
        h, w = frame_size(spec, height, width, image=False)
        assert h % 32 == 0 and w % 32 == 0, (height, width)
        frames = resize_to(_noise(2, height, width), (h, w))
        grid = video_processor(videos=[frames], do_sample_frames=False, return_tensors="pt")["video_grid_thw"]
        assert grid.tolist() == [[1, h // 16, w // 16]], (height, width)
        h, w = frame_size(spec, height, width, image=True)
        image = resize_to(_noise(1, height, width), (h, w))
        grid = image_processor(images=[image[0]], return_tensors="pt")["image_grid_thw"]
        assert grid.tolist() == [[1, h // 16, w // 16]], (height, width)


@pytest.mark.parametrize("height", [37, 112, 360, 719, 1080, 2160])
@pytest.mark.parametrize("width", [32, 112, 501, 640, 1280, 3840])
def test_a_32_px_grid_rounds_as_qwen3_vls_processors(height, width):
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize as processor_resize

    if max(height, width) / min(height, width) > 200:
        return
    for low, high in ((100352, 336 * 336), (200704, 6422528), (65536, 16777216)):
        expected = processor_resize(height, width, factor=32, min_pixels=low, max_pixels=high)
        assert smart_resize(height, width, low, high, grid=32) == expected


@pytest.mark.parametrize(("model", "tile"), [("llava_onevision_7b", 384), ("internvl_8b", 448)])
def test_tiled_families_get_frames_resized_once_straight_to_their_tile(of_model, sources, model, tile):
    """LLaVA-OneVision and InternVL3 frames were shrunk to ~336x336 (252 x 448 from 720p), then upsampled
    by their processors to 384x384 / 448x448. Now a 720p frame is one bicubic resize of the source to the
    tile, which the processor leaves as it is; the prompt frame keeps its source size for their tiling."""
    import decord
    from transformers import InternVLVideoProcessor, LlavaOnevisionVideoProcessor

    spec = replace(of_model[model], num_frames=2)
    video, image = sources[720, 1280]
    clip = decode_clip(str(video), 0.0, 1.0, spec)
    raw = decord.VideoReader(str(video), num_threads=1).get_batch(clip.indices).asnumpy()
    direct = np.stack([np.asarray(Image.fromarray(f).resize((tile, tile), Image.BICUBIC)) for f in raw])
    assert clip.frames.shape == (2, tile, tile, 3)
    assert np.array_equal(clip.frames, direct)

    processor_class = LlavaOnevisionVideoProcessor if tile == 384 else InternVLVideoProcessor
    processor = processor_class(size={"height": tile, "width": tile})
    resized = processor(videos=[clip.frames], return_tensors="pt")["pixel_values_videos"]
    as_given = processor(videos=[clip.frames], do_resize=False, return_tensors="pt")["pixel_values_videos"]
    assert resized.shape[-2:] == (tile, tile) and np.array_equal(resized.numpy(), as_given.numpy())

    assert np.array_equal(load_image(image, spec), np.asarray(Image.open(image).convert("RGB")))


def _old_smart_resize(height: int, width: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """core.decoding.smart_resize as it was before each family got its own geometry (grid 28 only)."""
    h, w = max(28, round(height / 28) * 28), max(28, round(width / 28) * 28)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(28, math.floor(height / beta / 28) * 28)
        w = max(28, math.floor(width / beta / 28) * 28)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h, w = math.ceil(height * beta / 28) * 28, math.ceil(width * beta / 28) * 28
    return h, w


def _old_resize(frames: np.ndarray, min_pixels: int, max_pixels: int) -> np.ndarray:
    h, w = _old_smart_resize(frames.shape[1], frames.shape[2], min_pixels, max_pixels)
    if (h, w) == frames.shape[1:3]:
        return frames
    return np.stack([np.asarray(Image.fromarray(f).resize((w, h), Image.BICUBIC)) for f in frames])


@pytest.mark.parametrize(
    ("overrides", "fingerprint"),
    [
        (("media=tiny",), "1d12afa9a942"),
        (("media=qwen_64f",), "6afa86371177"),
        (("+exp=quickstart",), "403151b54093"),
    ],
)
def test_qwen2_and_tiny_media_give_the_frames_and_fingerprints_they_gave(
    compose, sources, overrides, fingerprint
):
    """media=tiny, the quickstart's and media=qwen_64f: the same bytes as before, decoded and as images, and
    the same fingerprints (so stored results and cached frames stay valid)."""
    import decord

    spec = compose("train", *overrides).media
    assert spec.fingerprint == fingerprint
    for (height, width), (video, image) in sources.items():
        clip = decode_clip(str(video), 0.0, 1.0, replace(spec, num_frames=2))
        raw = decord.VideoReader(str(video), num_threads=1).get_batch(clip.indices).asnumpy()
        expected = _old_resize(raw, spec.min_pixels, spec.max_pixels)
        assert np.array_equal(clip.frames, expected), (height, width)
        source = np.asarray(Image.open(image).convert("RGB"))[None]
        expected = _old_resize(source, spec.image_min_pixels, spec.image_max_pixels)[0]
        assert np.array_equal(load_image(image, spec), expected), (height, width)


def test_frame_size_is_the_size_decoding_gives(shipped, sources):
    """The plan counts visual tokens from ``frame_size`` without decoding: for every shipped media and
    several source sizes it equals what decoding a video and loading an image hand the processor (one
    image file under every spec, so a cached image of one spec is never another's)."""
    for name, spec in shipped.items():
        spec = replace(spec, num_frames=2)
        for (height, width), (video, image) in sources.items():
            clip = decode_clip(str(video), 0.0, 1.0, spec)
            assert clip.frames.shape[1:3] == frame_size(spec, height, width, image=False), (name, height)
            assert load_image(image, spec).shape[:2] == frame_size(spec, height, width, image=True), (
                name,
                height,
            )


def test_a_tile_is_the_frames_pixel_range():
    """Every reader of ``max_pixels`` (token counts, exports, outputs) sees a tiled spec's real frame size."""
    MediaSpec(min_pixels=384**2, max_pixels=384**2, grid=1, tile=384)
    with pytest.raises(ValueError, match=r"media.tile=384 sizes every frame 384x384: set media.min_pixels"):
        MediaSpec(min_pixels=100352, max_pixels=112896, tile=384)
    with pytest.raises(ValueError, match="1024 <= min <= max"):
        MediaSpec(grid=32)  # the tiny range's 784 px minimum is below one 32-px cell


def test_each_familys_official_media_is_named_the_official_input(shipped, of_model):
    """A real Qwen3-VL, LLaVA-OneVision or InternVL3 run at its own media is the official input as its
    release processes it, not "NOT the official input" for differing from Qwen's geometry; Qwen2/2.5-VL's
    and the tiny media's lines are as they were."""
    from eval.benchmarks.base import SummaryContext
    from eval.benchmarks.v2p import V2P

    def protocol(media: MediaSpec) -> str:
        return V2P.summary(SummaryContext(None, media, {}, {}))["protocol"]

    qwen = "64 frames of at most 112896 px (~336x336), prompt frame 200704-6422528 px"
    assert protocol(of_model["qwen2_5_vl_7b"]) == f"the official input: {qwen}"
    assert protocol(of_model["qwen2_vl_7b"]) == f"the official input: {qwen}"
    assert protocol(of_model["qwen3_vl_8b"]) == (
        f"the official input as Qwen3-VL's release processes it: {qwen}, sides in multiples of 32"
    )
    for model, family, tile in (
        ("llava_onevision_7b", "LLaVA-OneVision", 384),
        ("internvl_8b", "InternVL3", 448),
    ):
        assert protocol(of_model[model]) == (
            f"the official input as {family}'s release processes it: 64 frames of {tile}x{tile}, "
            "prompt frame 200704-6422528 px at its own size"
        )
        assert protocol(replace(of_model[model], num_frames=32)).startswith("NOT the official input")
    assert protocol(shipped["tiny"]) == (
        "NOT the official input (64 frames of at most 336x336): 8 frames of at most 7056 px (~84x84), "
        "prompt frame 784-7056 px"
    )
