"""A live server on loopback: the real engine (SmolLM2-135M + the distilled draft) behind
uvicorn on a free port, in a thread of the test process."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import httpx

from adaserve.engine import Engine, EngineConfig
from adaserve.server.app import ServerSettings, create_app
from adaserve.server.errors import PARSER_HEADER_BYTES
from adaserve.server.slo_classes import DEFAULT_CLASSES, parse_classes

BASELINE_MS = 100.0  # a fixed baseline so classes do not depend on this machine's speed


@dataclass
class Live:
    url: str
    engine: Engine
    app: object

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=kw.pop("timeout", 120.0), **kw)

    def pool_whole(self, wait_s: float = 10.0) -> bool:
        """Every KV slot free and nothing queued (within wait_s: an abort lands at the
        next iteration)."""
        core = self.engine.core
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not core.slots and not core.waiting and not self.engine._inbox \
                    and core.free_slots == core.n_slots:
                return True
            time.sleep(0.05)
        return False


# the shared `live` server's policy (tests/server/conftest.py says why the door is off)
LIVE_POLICY = "adaserve:refuse_tpot=off"


def start(models, **cfg) -> tuple[Live, callable]:
    import uvicorn

    # budget 16: the server tests exercise speculation (trees, verify, aborts mid-tree);
    # the default B is measured and may be 1 (no speculation) on the machine at hand
    config = EngineConfig(**{"policy": "adaserve", "max_context": 256, "kv_cache_mb": 512,
                             "budget": 16, **cfg})
    engine = Engine(config, models=models)
    settings = ServerSettings(model_name="smollm2-135m",
                              classes=parse_classes(DEFAULT_CLASSES, BASELINE_MS),
                              default_class="relaxed", baseline_ms=BASELINE_MS,
                              max_body_bytes=256 * 1024)
    app = create_app(engine, settings)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                           h11_max_incomplete_event_size=PARSER_HEADER_BYTES))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=30)
        engine.close()

    return Live(f"http://127.0.0.1:{port}", engine, app), stop
