"""The estate layout's ``causal:`` section: trust roots read from .pub files, every bad value located, keys on disk."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from flowcast.causal.keys import KeyFileError, create_signer, load_signer, read_verify_key
from flowcast.house.layout import LayoutError, load_layout


def keys(tmp_path: Path, *names: str) -> dict[str, bytes]:
    return {name: bytes(create_signer(tmp_path / "keys", name)[0].verify_key) for name in names}


def layout(tmp_path: Path, causal: str, cast: str = "cast:") -> Path:
    flows = tmp_path / "flows"
    flows.mkdir(exist_ok=True)
    (flows / "idle.flo").write_text("house idle\nframer idle be active first rest\n  frame rest\n    print resting\n")
    path = tmp_path / "beta.yaml"
    path.write_text(f"""estate: beta
houses:
  - {{name: manor, flow: flows/idle.flo, manor: true}}
  - {{name: w1, flow: flows/idle.flo}}
{cast}
{causal}
""")
    return path


def test_the_section_loads_topics_keys_peers_and_caps(tmp_path):
    pubs = keys(tmp_path, "alice", "bob", "carol")
    loaded = load_layout(layout(tmp_path, f"""causal:
  keys: keys
  topics:
    chat:
      owner: alice.pub
      publishers: [alice.pub, bob.pub, {pubs['carol'].hex()}]
      sign_as: bob
    news/daily: {{owner: {pubs['alice'].hex()}}}
  peers: [alpha, gamma]
  grace: 60.5
  epoch_every: 3600
  heads_every: 2.5
  max_buffered: 500
  max_per_publisher: 50
  dep_wait: 2.5
  epoch_max_messages: 20000
  epoch_max_bytes: 8388608
""", cast="cast: {house: w1}"))
    spec = loaded.causal
    config = spec.config
    assert spec.keys == tmp_path / "keys" and spec.house == "w1"
    assert spec.sign_as == {"chat": "bob"}
    assert spec.state_path(loaded.cast) == loaded.cast.dir / "causal.sqlite3"
    assert config.peers == ("alpha", "gamma") and config.grace == 60.5 and config.epoch_every == 3600.0
    assert config.heads_every == 2.5
    assert (config.max_buffered, config.max_per_publisher) == (500, 50)
    assert config.dep_wait == 2.5
    assert (config.epoch_max_messages, config.epoch_max_bytes) == (20_000, 8 << 20)
    chat = config.topic("chat")
    assert chat.owner == pubs["alice"] and chat.publishers == set(pubs.values())
    assert config.topic("news/daily").publishers == {pubs["alice"]}


def test_an_empty_section_relays_nothing_and_no_section_is_no_causal(tmp_path):
    loaded = load_layout(layout(tmp_path, "causal:"))
    assert loaded.causal.config.topics == {} and loaded.causal.keys == loaded.run / "keys"
    assert loaded.causal.config.epoch_every is None and loaded.causal.config.grace == 300.0
    assert loaded.causal.config.heads_every == 10.0 and loaded.causal.config.dep_wait == 5.0
    assert (loaded.causal.config.epoch_max_messages, loaded.causal.config.epoch_max_bytes) == (100_000, 256 << 20)
    assert load_layout(layout(tmp_path, "causal: {heads_every: null}")).causal.config.heads_every is None
    assert loaded.causal.house == "manor"
    assert load_layout(layout(tmp_path, "")).causal is None


def test_without_a_cast_section_the_error_says_why(tmp_path):
    with pytest.raises(LayoutError) as raised:
        load_layout(layout(tmp_path, "causal: {peers: [alpha]}", cast=""))
    text = str(raised.value)
    assert "a causal: section needs a cast: section" in text and "beta.yaml:6:" in text


HEX = "ab" * 32


@pytest.mark.parametrize("causal, says", [
    ("causal: {topics: {chat: {owner: nobody.pub}}}", "owner of causal topic 'chat': no verify key file"),
    ("causal: {topics: {chat: {owner: bad.pub}}}", "bad.pub does not hold 64 hex digits"),
    ("causal: {topics: {chat: {owner: 'abcd'}}}", "no verify key file"),
    (f"causal: {{topics: {{chat: {{owner: {HEX}, publishers: [nobody.pub]}}}}}}", "a publisher of causal topic 'chat'"),
    (f"causal: {{topics: {{chat: {{owner: {HEX}, publishers: alice.pub}}}}}}", "publishers of causal topic 'chat' must be a list"),
    (f"causal: {{topics: {{'bad topic': {{owner: {HEX}}}}}}}", "causal topic 'bad topic'"),
    ("causal: {topics: {chat: {publishers: []}}}", "has no 'owner'"),
    (f"causal: {{topics: {{chat: {{owner: {HEX}, sign_as: carol}}}}}}", "sign_as of causal topic 'chat': no verify key file"),
    (f"causal: {{topics: {{chat: {{owner: {HEX}, sign_as: alice}}}}}}", "key 'alice' is not the owner or a publisher"),
    (f"causal: {{topics: {{chat: {{owner: {HEX}, sign_as: '../x'}}}}}}", "a key name is 1 to 64"),
    (f"causal: {{topics: {{chat: {{owner: {HEX}, sign_us: alice}}}}}}", "did you mean 'sign_as'"),
    ("causal: {topics: [chat]}", "causal topics must be a mapping"),
    ("causal: {peers: [beta]}", "causal peer 'beta' is this estate"),
    ("causal: {peers: [alpha, alpha]}", "causal peer 'alpha' is named twice"),
    ("causal: {peers: ['a b']}", "a causal peer is 'a b'"),
    ("causal: {grace: -1}", "causal grace is '-1', outside 0..86400 seconds"),
    ("causal: {grace: soon}", "causal grace must be a number of seconds"),
    ("causal: {epoch_every: 0.5}", "causal epoch_every is '0.5', outside 1..3.1536e+07 seconds"),
    ("causal: {heads_every: 0}", "causal heads_every is '0', outside 0.1..3600 seconds"),
    ("causal: {heads_every: often}", "causal heads_every must be a number of seconds"),
    ("causal: {max_buffered: 0}", "causal max_buffered is '0', outside"),
    ("causal: {epoch_max_messages: 0}", "causal epoch_max_messages is '0', outside"),
    ("causal: {max_per_publisher: 1.5}", "causal max_per_publisher must be a whole number"),
    ("causal: {gracee: 5}", "did you mean 'grace'"),
    ("causal: {dep_wait: -1}", "causal dep_wait is '-1', outside 0..3600 seconds"),
    ("causal: [1]", "causal must be a mapping"),
])
def test_bad_values_are_located_errors(tmp_path, causal, says):
    keys(tmp_path, "alice")
    (tmp_path / "keys" / "bad.pub").write_text("not hex\n")
    with pytest.raises(LayoutError) as raised:
        load_layout(layout(tmp_path, causal.replace("{", "{keys: keys, ", 1) if causal.startswith("causal: {") else causal))
    text = str(raised.value)
    assert says in text
    assert "beta.yaml:6:" in text  # on the section's line, at the value


def test_keygen_writes_a_private_key_and_its_pub_and_never_replaces_them(tmp_path):
    key, created = create_signer(tmp_path / "k", "alice")
    assert created
    secret, public = tmp_path / "k" / "alice.key", tmp_path / "k" / "alice.pub"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert read_verify_key(public) == bytes(key.verify_key)
    assert public.read_text() == bytes(key.verify_key).hex() + "\n"
    again, created = create_signer(tmp_path / "k", "alice")
    assert not created and bytes(again) == bytes(key)  # loaded, not replaced
    assert bytes(load_signer(tmp_path / "k", "alice")) == bytes(key)
    public.unlink()
    create_signer(tmp_path / "k", "alice")  # a lost .pub is written again from the key
    assert read_verify_key(public) == bytes(key.verify_key)
    assert not [p for p in (tmp_path / "k").iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_a_key_others_may_read_a_mismatched_pub_or_a_missing_key_is_refused_with_the_file(tmp_path):
    create_signer(tmp_path / "k", "alice")
    secret = tmp_path / "k" / "alice.key"
    os.chmod(secret, 0o640)
    with pytest.raises(KeyFileError, match="mode 0640; it must be 0600"):
        load_signer(tmp_path / "k", "alice")
    with pytest.raises(KeyFileError, match="flowcast causal keygen bob"):
        load_signer(tmp_path / "k", "bob")
    create_signer(tmp_path / "k", "bob")
    (tmp_path / "k" / "alice.pub").replace(tmp_path / "k" / "bob.pub")
    with pytest.raises(KeyFileError, match="does not match"):
        create_signer(tmp_path / "k", "bob")
    (tmp_path / "k" / "carol.key").write_text("zz\n")
    os.chmod(tmp_path / "k" / "carol.key", 0o600)
    with pytest.raises(KeyFileError, match="does not hold 64 hex digits"):
        load_signer(tmp_path / "k", "carol")


def _stop_when(house, done):
    from flowcast.runtime import sleep

    for _ in range(500):
        if done():
            break
        yield sleep(0.01)
    house.stop()


def test_the_cast_cache_house_gets_the_relay_signing_as_the_layout_says(tmp_path):
    from flowcast.causal.service import CausalService
    from flowcast.house.estate import open_house

    pubs = keys(tmp_path, "alice", "bob")
    loaded = load_layout(layout(tmp_path, """causal:
  keys: keys
  topics:
    chat: {owner: alice.pub, publishers: [bob.pub], sign_as: bob}
""", cast="cast: {house: w1}"))
    manor = open_house(loaded, "manor", houses=2)
    w1 = open_house(loaded, "w1", houses=2)
    try:
        assert manor.causal is None  # the relay lives with the CAST cache only
        assert isinstance(w1.causal, CausalService)
        assert (loaded.run / "cast" / "causal.sqlite3").is_file()
        sub = w1.causal.subscribe("chat", "inbox")
        published = w1.causal.publish("chat", b"hello")
        assert published.msg.publisher == pubs["bob"]
        w1.scheduler.call_later(5.0, w1.stop)
        w1.scheduler.spawn(_stop_when(w1, lambda: published.done and sub.delivered == 1))
        w1.scheduler.run()
        assert published.error is None and [d["content"] for d in w1.store.queue("inbox").queue] == [b"hello"]
    finally:
        for house in (manor, w1):
            house.stop()
            house.run()


def test_a_signing_key_that_no_longer_matches_its_pub_stops_the_house_before_it_signs(tmp_path):
    from flowcast.house.estate import open_house

    keys(tmp_path, "alice", "bob")
    loaded = load_layout(layout(tmp_path, """causal:
  keys: keys
  topics:
    chat: {owner: alice.pub, publishers: [bob.pub], sign_as: bob}
"""))
    (tmp_path / "keys" / "bob.key").unlink()
    create_signer(tmp_path / "keys", "other")
    (tmp_path / "keys" / "other.key").rename(tmp_path / "keys" / "bob.key")
    with pytest.raises(KeyFileError, match="is not a publisher of topic 'chat'"):
        open_house(loaded, "manor", houses=2)
    assert not (loaded.run / "lane" / "manor").exists()  # what it opened was closed again


def test_flowcast_causal_keygen_prints_the_pub_and_status_says_when_nothing_runs(tmp_path, capsys):
    from flowcast.house.causalcli import main

    assert main(["keygen", "alice", "--dir", str(tmp_path / "keys")]) == 0
    out = capsys.readouterr().out
    public = read_verify_key(tmp_path / "keys" / "alice.pub")
    assert out.startswith("made key alice") and out.splitlines()[-1] == public.hex()
    assert main(["keygen", "alice", "--dir", str(tmp_path / "keys")]) == 0
    assert capsys.readouterr().out.startswith("kept the existing key alice")
    assert main(["keygen", "../alice", "--dir", str(tmp_path / "keys")]) == 1
    assert "a key name is" in capsys.readouterr().err
    path = layout(tmp_path, "causal: {keys: keys, topics: {chat: {owner: alice.pub}}}")
    assert main(["status", str(path)]) == 1
    assert "no status from estate beta's relay house manor" in capsys.readouterr().err
    assert main(["status", str(layout(tmp_path, ""))]) == 1
    assert "has no causal: section" in capsys.readouterr().err
