"""The store's cheap reads for the broker's topic loads: namespace policies shared read-only, topic
names parsed once (WC-4)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from velamq import _topic_name
from velamq._errors import InvalidTopicNameError, NotFoundError
from velamq._topic_name import TopicName
from velamq.metadata import MetadataStore, _names


def test_namespace_policies_are_one_read_only_object_until_they_change(tmp_path: Path) -> None:
    async def main() -> None:
        store = MetadataStore(tmp_path / "metadata.db")
        await store.start()
        try:
            first = await store.namespace_policies("public/default")
            assert first == await store.get_policies("public/default")
            assert await store.namespace_policies("public/default") is first
            with pytest.raises(TypeError):
                first["messageTTLInSeconds"] = 1  # type: ignore[index]
            await store.set_policy("public/default", "messageTTLInSeconds", 5)
            second = await store.namespace_policies("public/default")
            assert second is not first and second["messageTTLInSeconds"] == 5
            assert "messageTTLInSeconds" not in first  # what a reader holds does not change under it
            assert second == await store.get_policies("public/default")
            with pytest.raises(NotFoundError):
                await store.namespace_policies("public/nowhere")
        finally:
            await store.close()

    asyncio.run(main())


def test_topic_names_are_parsed_once_and_the_memory_of_them_is_bounded() -> None:
    name = "persistent://public/default/parsed-once"
    assert _names.check_topic(name) is _names.check_topic(name)
    assert _names.check_topic(name) == TopicName.parse(name)
    with pytest.raises(InvalidTopicNameError):
        _names.check_topic("persistent://public/default/ bad")
    # The store's check keeps no names of its own: TopicName.parse's memory of them is the bound.
    for i in range(_topic_name._parsed_max * 2):
        _names.check_topic(f"t{i}")
    assert len(_topic_name._parsed) <= _topic_name._parsed_max
