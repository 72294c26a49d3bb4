"""Presets, build commands, names and config: everything about emulated fabrics that needs no root."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from shardscope.config import validate_config
from shardscope.emulated import netns
from shardscope.emulated.commands import main as fabric_main
from shardscope.emulated.fabric import Names, build_commands, check_subnet, qdisc_commands
from shardscope.emulated.launch import EmulatedJob
from shardscope.emulated.presets import BUILTIN, SLOW_MBIT, FabricPreset, Link, all_presets, get_preset, preset_from_config
from shardscope.errors import UserError
from factories import default_config

REPO = Path(__file__).resolve().parents[2]
CONFIG = default_config()
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def test_config_spells_out_the_builtin_presets() -> None:
    assert CONFIG["emulated"]["enabled"] is False  # the default pipeline is unchanged
    from_config = all_presets(CONFIG["emulated"])
    for name, preset in BUILTIN.items():
        assert from_config[name].to_dict() == preset.to_dict(), name


def test_builtin_presets() -> None:
    fast, pcie, nvl = BUILTIN["fast"], BUILTIN["pcie_like"], BUILTIN["nvl_groups"]
    assert fast.bottleneck_mbit(fast.placements["all"]) is None
    assert pcie.bottleneck_mbit(pcie.placements["all"]) == SLOW_MBIT
    assert nvl.bottleneck_mbit(nvl.placements["in_group"]) is None  # the pair inside one group: uncapped
    assert nvl.bottleneck_mbit(nvl.placements["across_groups"]) == SLOW_MBIT  # the cliff
    assert [link.name for link in nvl.path(1, 3)] == ["h1-s0", "s0-s1", "h3-s1"]
    assert list(nvl.placements) == ["all", "in_group", "across_groups"]


@pytest.mark.parametrize(("spec", "message"), [
    ({"hosts": 2, "links": [{"a": "h0", "b": "s0"}]}, "host h1 has 0 links"),
    ({"hosts": 3, "links": [{"a": "h0", "b": "h1"}, {"a": "h1", "b": "h2"}]}, "host h1 has 2 links"),
    ({"hosts": 2, "links": [{"a": "h0", "b": "s0"}, {"a": "h1", "b": "s1"}]}, "one tree"),
    ({"hosts": 2, "links": [{"a": "h0", "b": "s0"}, {"a": "h1", "b": "s0"}, {"a": "s0", "b": "s1"}, {"a": "s1", "b": "s0"}]}, "listed twice"),
    ({"hosts": 2, "links": [{"a": "h0", "b": "s0", "rate_mbit": 0}, {"a": "h1", "b": "s0"}]}, "rate_mbit must be null"),
    ({"hosts": 2, "links": [{"a": "h0", "b": "s0", "delay_ms": -1}, {"a": "h1", "b": "s0"}]}, "delay_ms must be a number"),
    ({"hosts": 2, "links": [{"a": "h0", "b": "x0"}, {"a": "h1", "b": "x0"}]}, "neither a host"),
    ({"hosts": 2, "links": [{"a": "h0", "b": "h5"}]}, "names host h5"),
    ({"hosts": 1, "links": [{"a": "h0", "b": "s0"}]}, "hosts must be an integer from 2"),
    ({"hosts": 2, "links": [{"a": "h0", "b": "h1"}], "placements": {"solo": ["h0"]}}, "at least two different hosts"),
    ({"hosts": 2, "links": [{"a": "h0", "b": "h1", "speed": 1}]}, "unknown key 'speed'"),
    ({"hosts": 2, "links": []}, "non-empty list"),
])
def test_bad_presets_fail_with_one_sentence_naming_the_key(spec: dict, message: str) -> None:
    with pytest.raises(UserError, match=message) as info:
        preset_from_config("mine", spec)
    assert str(info.value).startswith("emulated.fabrics.mine")
    assert "\n" not in str(info.value)


def test_user_presets_extend_and_override_builtins() -> None:
    section = {"fabrics": {"pair": {"hosts": 2, "links": [{"a": "h0", "b": "h1", "rate_mbit": 50, "delay_ms": 2}]},
                           "fast": {"hosts": 2, "links": [{"a": "h0", "b": "h1"}]}}}
    presets = all_presets(section)
    assert presets["pair"].needs_delay and presets["pair"].bottleneck_mbit((0, 1)) == 50
    assert presets["fast"].switches == () and presets["pcie_like"] == BUILTIN["pcie_like"]
    with pytest.raises(UserError, match="unknown emulated fabric 'nope'; expected one of"):
        get_preset("nope", section)


def _adds(cmds: list[list[str]]) -> list[list[str]]:
    return [c for c in cmds if c[:1] == ["ip"] and "add" in c and "link" in c]


def test_build_commands_never_touch_the_machines_own_namespace() -> None:
    names = Names("ssfab-123-abcd")
    cmds = build_commands(BUILTIN["nvl_groups"], names)
    namespaces = {names.host(i) for i in range(4)} | {names.switch}
    assert [c[3] for c in cmds if c[:3] == ["ip", "netns", "add"]] == [*(names.host(i) for i in range(4)), names.switch]
    for cmd in cmds[5:]:
        # every command names one of the fabric's namespaces: `ip -n NS`, `tc -n NS`, or veth ends `netns NS`
        if cmd[1] == "-n":
            assert cmd[2] in namespaces, cmd
        else:
            assert cmd[:3] == ["ip", "link", "add"] and cmd[cmd.index("netns") + 1] in namespaces and cmd[-2] == "netns" and cmd[-1] in namespaces, cmd
    assert not any("default" in c or "route" in c for c in cmds)
    bridges = [c for c in cmds if c[-2:] == ["type", "bridge"]]
    assert [b[5] for b in bridges] == ["br0", "br1"]
    tbf = [c for c in cmds if "tbf" in c]
    assert [c[2] for c in tbf] == [names.switch, names.switch]  # the trunk, both directions
    assert {c[6] for c in tbf} == {"t4a", "t4b"} and all("200mbit" in c for c in tbf)
    addrs = [c for c in cmds if c[3:5] == ["addr", "add"]]
    assert [a[5] for a in addrs] == ["10.213.0.1/24", "10.213.0.2/24", "10.213.0.3/24", "10.213.0.4/24"]


def test_qdisc_commands() -> None:
    assert qdisc_commands("ns", "eth0", Link("h0", "s0")) == []
    tbf = qdisc_commands("ns", "eth0", Link("h0", "s0", 200))
    assert tbf == [["tc", "-n", "ns", "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "tbf", "rate", "200mbit",
                    "burst", "65536", "latency", "50ms"]]
    netem = qdisc_commands("ns", "eth0", Link("h0", "s0", 100, 0.5))[0]
    assert netem[10:] == ["netem", "delay", "0.5ms", "rate", "100mbit", "limit", "10000"]


@pytest.mark.parametrize("subnet", ["8.8.8.0/24", "127.0.0.0/8", "10.213.0.0/30", "10.213.0.1/24", "fd00::/64", "nonsense"])
def test_subnet_must_be_private_ipv4_with_room(subnet: str) -> None:
    with pytest.raises(UserError, match="emulated.subnet"):
        check_subnet(subnet, 4)
    assert str(check_subnet("169.254.7.0/24", 4)) == "169.254.7.0/24"


def test_names_and_cleanup_matching() -> None:
    base = netns.new_base("ssfab-")
    assert netns.owner_pid(f"{base}-h3", "ssfab-") is not None
    assert netns.owner_pid(f"{base}-sw", "ssfab-") == netns.owner_pid(f"{base}-probe", "ssfab-")
    # names that merely share the prefix are never ours (another tool, another person)
    for other in ("ssfab-", "ssfab-x-h0", "ssfab-12-abcd-eth0", "ss-12-abcd-h0", "ssfab-12-abcd-h0-extra"):
        assert netns.owner_pid(other, "ssfab-") is None
    for bad in ("", "SS-", "ssfab", "a" * 13 + "-", "ss fab-"):
        with pytest.raises(UserError, match="emulated.prefix"):
            netns.check_prefix(bad)


def test_job_fields_label_the_result() -> None:
    job = EmulatedJob(BUILTIN["nvl_groups"], "across_groups", timeout_s=60)
    fields = job.job_fields()
    assert fields["fabric"] == "emulated:nvl_groups" and fields["fabric_hosts"] == ["h0", "h2"]
    assert fields["fabric_links"]["s0-s1"] == {"rate_mbit": SLOW_MBIT, "delay_ms": 0.0}
    assert fields["fabric_bottleneck_mbit"] == SLOW_MBIT and job.placement_label == "across_groups@nvl_groups"
    with pytest.raises(UserError, match="has no placement 'nowhere'"):
        EmulatedJob(BUILTIN["fast"], "nowhere")


def test_without_root_the_stage_says_why_in_one_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    netns._probe.cache_clear()
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    try:
        problem = netns.support_problem()
        assert problem is not None and "need root" in problem and "\n" not in problem
        with pytest.raises(UserError, match="cannot build emulated fabric 'fast': emulated fabrics need root"):
            from shardscope.emulated.launch import run_collective

            run_collective(EmulatedJob(BUILTIN["fast"]), [], "/nonexistent/out.json", "/nonexistent/log")
    finally:
        netns._probe.cache_clear()


def test_cli_lists_presets_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert fabric_main(["list", "--json", "--config-json", json.dumps(CONFIG)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert set(listed) == {"fast", "pcie_like", "nvl_groups"}
    assert listed["pcie_like"]["links"][0] == {"a": "h0", "b": "s0", "rate_mbit": SLOW_MBIT, "delay_ms": 0.0}
    assert fabric_main(["list", "--config-json", "[1]"]) == 2
    assert "must be a JSON object" in capsys.readouterr().err


@pytest.mark.parametrize(("override", "key"), [
    ({"enabled": "yes"}, "emulated.enabled"),
    ({"enabled": True, "prefix": "Bad"}, "emulated.prefix"),
    ({"enabled": True, "fabrics": {"x": {"hosts": 2, "links": [{"a": "h0", "b": "q1"}]}}}, "emulated.fabrics.x.links[0].b"),
    ({"enabled": True, "ops": ["all_reducee"]}, "emulated.ops[0]"),
])
def test_schema_checks_the_emulated_section(override: dict, key: str) -> None:
    config = dict(CONFIG, emulated=dict(CONFIG["emulated"], **override))
    with pytest.raises(UserError) as info:
        validate_config(config, SCHEMA)
    assert str(info.value).startswith(f"invalid config key {key}:"), str(info.value)


def test_preset_is_frozen() -> None:
    preset = BUILTIN["fast"]
    with pytest.raises(AttributeError):
        preset.hosts = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        preset.placements["x"] = (0, 1)  # type: ignore[index]
    assert isinstance(FabricPreset("two", 2, (Link("h0", "h1"),)).placements["all"], tuple)
