"""moto in server mode, with each request handled atomically: `python moto_serial.py HOST PORT`.

moto's own server handles requests on threads and checks a write's condition and applies the write in separate
steps, so under load two conditional writes to one item can both succeed: six threads racing a PutItem with
`attribute_not_exists` on one key had two or more winners in 11 of 300 rounds on this 2-core machine with the
cores busy. DynamoDB applies a conditional write atomically (and S3 a conditional PutObject), and the lock and
storage tests depend on exactly that, so this launcher serves moto's application behind one lock.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import run_simple


def serialized(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    guard = threading.Lock()

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with guard:
            return list(app(environ, start_response))  # the whole response is made under the lock

    return serve


def main(host: str, port: int) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(host, port, serialized(app), threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
