"""Cluster shapes: the spec language and the live cluster's ray.nodes() view."""

from __future__ import annotations

import math

import pytest

from cluster.shape import parse_shape, parse_size, shape_from_ray_nodes
from core.errors import ConfigError


def test_groups_of_identical_nodes():
    shape = parse_shape("2x4xH100")

    assert [node.gpus for node in shape.nodes] == [4, 4]
    assert shape.nodes[0].resources["accelerator_type:H100"] == 1.0
    assert math.isinf(shape.nodes[0].resources["CPU"])  # not given: not checked


def test_mixed_groups_with_cpus_memory_and_custom_resources():
    shape = parse_shape("1x0:cpus=16+2x8xH200:cpus=192,memory=2Ti,h200_node=1")

    head, *workers = shape.nodes
    assert (head.gpus, head.resources["CPU"], head.accelerator_types) == (0, 16.0, [])
    assert workers[1].resources == {
        "CPU": 192.0,
        "GPU": 8.0,
        "memory": 2 * 1024**4,
        "accelerator_type:H200": 1.0,
        "h200_node": 1.0,
    }


def test_several_specs_add_up():
    assert len(parse_shape(["1x4xH100", "1x8xL40S"]).nodes) == 2


@pytest.mark.parametrize("spec", ["", "4xH100", "2x4xH100:cpus", "1x0xH100", "2x4:memory=lots"])
def test_bad_specs_are_refused(spec: str):
    with pytest.raises(ConfigError):
        parse_shape(spec)


def test_sizes():
    assert parse_size("32Gi") == 32 * 2**30
    assert parse_size("200G") == 200e9
    assert parse_size("1024") == 1024


def test_live_nodes_keep_alive_nodes_and_their_schedulable_resources():
    nodes = [
        {
            "NodeID": "abcdef0123",
            "Alive": True,
            "NodeManagerAddress": "10.0.0.1",
            "Resources": {
                "CPU": 8.0,
                "GPU": 4.0,
                "accelerator_type:H100": 1.0,
                "node:10.0.0.1": 1.0,
                "node:__internal_head__": 1.0,
                "object_store_memory": 1e9,
                "memory": 3e10,
            },
        },
        {"NodeID": "dead", "Alive": False, "NodeManagerAddress": "10.0.0.2", "Resources": {"CPU": 8.0}},
    ]

    shape = shape_from_ray_nodes(nodes)

    assert len(shape.nodes) == 1
    assert shape.nodes[0].resources == {"CPU": 8.0, "GPU": 4.0, "accelerator_type:H100": 1.0, "memory": 3e10}
