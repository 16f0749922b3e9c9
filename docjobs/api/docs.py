"""The docs page (`/docs`): Swagger UI served from the pinned `fastapi-offline` package, so it works offline,
and a Content-Security-Policy that lets it load nothing from anywhere but this API."""

from __future__ import annotations

import base64
import hashlib
import re

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

OPENAPI_URL = "/openapi.json"
DOCS_ASSETS = "/docs-assets"  # Swagger UI's JavaScript, CSS and favicon, from the pinned fastapi-offline package
INLINE_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.DOTALL)


def docs_page(title: str) -> tuple[bytes, str]:
    """Swagger UI's page with every asset on this origin, and the Content-Security-Policy that allows nothing else.

    FastAPI's page starts Swagger UI with an inline script: the policy names that script by its sha256
    rather than allowing inline scripts at all.
    """
    page = get_swagger_ui_html(
        openapi_url=OPENAPI_URL,
        title=title,
        swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png",
        swagger_ui_parameters={"validatorUrl": None},  # else the UI shows a badge fetched from a public validator
    )
    html = bytes(page.body)
    inline = " ".join(
        f"'sha256-{base64.b64encode(hashlib.sha256(script).digest()).decode()}'"
        for script in INLINE_SCRIPT.findall(html)
    )
    policy = (
        f"default-src 'none'; script-src 'self' {inline}; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; font-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    )
    return html, policy


class WithHeaders:
    """An ASGI app whose every response also carries `headers` (the docs assets get the docs page's policy)."""

    def __init__(self, app: ASGIApp, headers: dict[str, str]) -> None:
        self.app = app
        self.headers = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).update(self.headers)
            await send(message)

        await self.app(scope, receive, send_with_headers)


class DocsPage:
    """The `/docs` route: the page is rendered once, with its policy."""

    def __init__(self, title: str) -> None:
        self.html, policy = docs_page(title)
        self.headers = {"Content-Security-Policy": policy, "X-Content-Type-Options": "nosniff"}

    async def __call__(self) -> HTMLResponse:
        """Swagger UI, offline: every script, style sheet and image comes from this API."""
        return HTMLResponse(self.html, headers=self.headers)


def install_docs(app: FastAPI) -> None:
    """The docs page and its assets, both under the page's Content-Security-Policy."""
    page = DocsPage(f"{app.title} API")
    assets = StaticFiles(packages=[("fastapi_offline", "static")])
    app.mount(DOCS_ASSETS, WithHeaders(assets, page.headers), name="docs-assets")
    app.add_api_route("/docs", page, methods=["GET"], include_in_schema=False, name="docs")
