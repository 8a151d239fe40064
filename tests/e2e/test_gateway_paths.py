"""Relative config paths and local-search URLs through `citestream serve`.

The config file lives in one folder (`conf/`), the process runs in another
working directory (`elsewhere/`, which has files of the same names that
must not be used):
* `search.local.path = "kb"` indexes `conf/kb/`, and its passages reach the
  client as `search.local.url_base` + the path relative to the folder +
  `#anchor` (default `local:`); nothing of the server's filesystem (the
  absolute folder, `file:`) is in the response or in the upstream request;
* `search.static.path = "sources.json"` reads `conf/sources.json`.
"""

from __future__ import annotations

import json

from harness.checks import SOURCES, raw_post
from harness.procs import toml_dumps

KB = {
    "guide.md": "---\ntitle: Lisbon guide\n---\n# Lisbon guide\n\n## Trams\n\nTram 28 climbs from Baixa to Alfama "
                "past the cathedral.\n",
    "sub dir/porto.txt": "# Porto\n\nPort wine cellars line the Douro river in Vila Nova de Gaia.\n",
}


def layout(tmp_path, search: dict) -> tuple:
    conf, elsewhere = tmp_path / "conf", tmp_path / "elsewhere"
    for root, text in ((conf / "kb", "the config's folder"), (elsewhere / "kb", "the working directory")):
        for name, body in KB.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            # The working directory's copy says something else: it must not be used.
            (root / name).write_text(body if root.parent == conf else f"# Wrong\n\nFrom {text}: trams port wine.\n")
    (conf / "sources.json").write_text(json.dumps(SOURCES))
    (elsewhere / "sources.json").write_text(json.dumps([{"title": "wrong", "url": "https://wrong.example/"}]))
    cfg = conf / "citestream.toml"
    cfg.write_text(toml_dumps({"search": search}))
    return cfg, elsewhere


def ask(gw, question: str) -> tuple[dict, bytes]:
    body = json.dumps({"model": "citestream-demo", "web_search": True,
                       "messages": [{"role": "user", "content": question}]}).encode()
    status, headers, data = raw_post(gw.url + "/v1/chat/completions", body)
    assert status == 200, data[:2000]
    assert headers["x-citestream-search"] == "injected", headers
    return json.loads(data), data


def test_local_folder_next_to_the_config_and_relative_urls(serve, tmp_path):
    cfg, elsewhere = layout(tmp_path, {"provider": "local", "local": {"path": "kb"}})
    gw = serve(None, args=["--config", str(cfg)], cwd=elsewhere)
    got, raw = ask(gw, "Which tram climbs to Alfama?")
    urls = [s["url"] for s in got["sources"]]
    assert urls[0] == "local:guide.md#trams", urls
    assert all(u.startswith("local:") for u in urls), urls
    got, raw2 = ask(gw, "Where are the port wine cellars on the Douro?")
    assert got["sources"][0]["url"] == "local:sub%20dir/porto.txt#porto"
    for data in (raw, raw2):
        assert str(tmp_path).encode() not in data and b"file:" not in data and b"Wrong" not in data


def test_url_base(serve, tmp_path):
    cfg, elsewhere = layout(tmp_path, {"provider": "local",
                                       "local": {"path": "kb", "url_base": "https://kb.example/docs/"}})
    gw = serve(None, args=["--config", str(cfg)], cwd=elsewhere)
    got, _ = ask(gw, "Which tram climbs to Alfama?")
    assert got["sources"][0]["url"] == "https://kb.example/docs/guide.md#trams"


def test_static_file_next_to_the_config(serve, tmp_path, replay):
    cfg, elsewhere = layout(tmp_path, {"provider": "static", "static": {"path": "sources.json"}})
    text = cfg.read_text() + toml_dumps({"upstream": {"base_url": replay.url}})
    cfg.write_text(text)
    gw = serve(None, args=["--config", str(cfg)], cwd=elsewhere)
    body = json.dumps({"model": "replay:openai_gpt41nano_text_usage", "web_search": True,
                       "messages": [{"role": "user", "content": "Lisbon?"}]}).encode()
    status, headers, data = raw_post(gw.url + "/v1/chat/completions", body)
    assert status == 200 and headers["x-citestream-search"] == "injected", data[:2000]
    (ex,) = replay.wait_for(lambda log: len(log) == 1 and log[0].done)
    sent = ex.json()["messages"][0]["content"]
    assert all(s["url"] in sent for s in SOURCES) and "wrong.example" not in sent
    assert str(tmp_path) not in ex.body.decode()
