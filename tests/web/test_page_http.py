"""The chat page over plain HTTP: GET and HEAD / with their headers (a CSP whose hashes match
the page's inline style and script), the embedded page equal to server/web/index.html, no
external resources, relative API URLs, path_prefix, and the page served without a key while the
API needs one."""
import base64
import hashlib
import os
import re

import xlharness as X
from conftest import ROOT


def source_page():
    with open(os.path.join(ROOT, "server", "web", "index.html"), "rb") as f:
        return f.read()


def csp_hash(text):
    return "'sha256-%s'" % base64.b64encode(hashlib.sha256(text).digest()).decode()


def inline(page, tag):
    blocks = re.findall(rb"<%s>(.*?)</%s>" % (tag, tag), page, re.S)
    assert len(blocks) == 1, "the page must have exactly one <%s> (CSP hash)" % tag.decode()
    return blocks[0]


def check_page_headers(h, length):
    assert h["content-type"] == "text/html; charset=utf-8"
    assert h["cache-control"] == "no-cache"
    assert h["x-content-type-options"] == "nosniff"
    assert int(h["content-length"]) == length
    csp = dict((d.strip().split(" ", 1) + [""])[:2] for d in h["content-security-policy"].split(";"))
    assert csp["default-src"] == "'self'"
    assert csp["connect-src"] == "'self'"
    assert csp["frame-ancestors"] == "'none'"
    assert "unsafe-inline" not in h["content-security-policy"]
    page = source_page()
    assert csp["script-src"] == csp_hash(inline(page, b"script"))
    assert csp["style-src"] == csp_hash(inline(page, b"style"))


def test_get_and_head(start_daemon, tiny_model):
    d = start_daemon(tiny_model)
    st, h, body = X.request(d.port, "GET", "/")
    assert st == 200
    assert body == source_page()          # the binary carries the page as it is in the tree
    check_page_headers(h, len(body))
    st, h, hb = X.request(d.port, "HEAD", "/")
    assert st == 200 and hb == b""
    check_page_headers(h, len(body))
    st, h, b = X.request(d.port, "POST", "/", body=b"{}")
    assert st == 405 and h["allow"] == "GET, HEAD"
    assert X.request(d.port, "GET", "/index.html")[0] == 404
    assert X.metric(d.port, 'xlserve_requests_total{route="ui",status="200"}') == 2


def test_page_is_self_contained():
    page = source_page().decode("utf-8")
    # nothing fetched from elsewhere: no src/href but the empty data: icon, no @import/url()
    assert re.findall(r'\b(?:src|href)\s*=\s*"([^"]*)"', page) == ["data:,"]
    assert "@import" not in page and "url(" not in page
    assert "http://" not in page and "https://" not in page
    # API calls are relative to the page (path_prefix, proxies): no absolute '/v1/...'
    assert not re.search(r"""['"`]/v1""", page)
    assert "BASE + 'v1/" in page or 'BASE + "v1/' in page
    # no inline handlers or style attributes (the CSP hashes cover only the two elements)
    assert not re.search(r"<[^>]+\son[a-z]+\s*=", page)
    assert not re.search(r"<[^>]+\sstyle\s*=", page)


def test_path_prefix(start_daemon, tiny_model):
    d = start_daemon(tiny_model, "--path-prefix", "/xl", prefix="/xl")
    page = source_page()
    for path in ("/xl/", "/xl"):
        st, h, body = X.request(d.port, "GET", path)
        assert st == 200 and body == page, path
        check_page_headers(h, len(page))
    assert X.request(d.port, "GET", "/")[0] == 404
    assert X.request(d.port, "GET", "/xlx/")[0] == 404
    assert X.request(d.port, "POST", "/xl/v1/sessions")[0] == 201


def test_page_open_while_api_needs_key(start_daemon, tiny_model):
    d = start_daemon(tiny_model, "--api-keys", "k1")
    st, h, body = X.request(d.port, "GET", "/")
    assert st == 200 and body == source_page()
    assert X.request(d.port, "HEAD", "/")[0] == 200
    st, h, _ = X.request(d.port, "POST", "/v1/sessions")
    assert st == 401 and h["www-authenticate"] == "Bearer"
    assert X.request(d.port, "POST", "/v1/sessions", headers={"Authorization": "Bearer k1"})[0] == 201
