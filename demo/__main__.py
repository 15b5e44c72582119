"""The live demo: draw on any frame of a video, ask, interrupt the streamed answer.

    python -m demo checkpoint=outputs/quickstart/checkpoints/checkpoint-1000
    python -m demo model=qwen2_5_vl_7b model.name_or_path=/ckpt/Qwen2.5-VL-7B-Instruct media=qwen_64f
    python -m demo demo.video=outputs/data/synthetic/world/videos/v_syn000000.mp4 demo.port=0

The model loads as ``python -m eval`` loads it (a checkpoint on its run's base and media spec); the page is
served on ``demo.host:demo.port`` (the loopback address by default) until Ctrl-C.
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from core.cli import run_cli
from demo.config import DemoConfig, register_demo_config

register_demo_config()


def serve(config: DemoConfig) -> None:
    from core.media import FrameCache
    from demo.server import DemoState, make_server
    from demo.session import LiveSession
    from eval.run import resolve
    from eval.run_models import open_models
    from models.loading import default_device

    run = resolve(config.as_evaluation())  # a checkpoint: its run's base and media spec
    settings = config.demo
    models = open_models(run, FrameCache(run.cfg.data.frame_cache), device=default_device(), serve=False)
    session = LiveSession(
        models.model(run.checkpoint), models.chat, settings.max_new_tokens,
        settings.max_new_tokens_reaction, settings.token_delay_s,
    )  # fmt: skip
    state = DemoState(session, Path(settings.out_dir), settings.max_frames, settings.tokens_per_second)
    if settings.video:
        state.load_video(Path(settings.video))
    server = make_server(state, settings.host, settings.port)
    host, port = server.server_address[:2]
    print(f"demo: http://{host}:{port}/  (saved items: {Path(settings.out_dir).resolve()})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@hydra.main(version_base="1.3", config_path="../conf", config_name="demo")
def main(cfg: DictConfig) -> None:
    config: DemoConfig = OmegaConf.to_object(cfg)
    run_cli(lambda: serve(config))


if __name__ == "__main__":
    main()
