"""engines/unprefilled.py: the prompt tokens a backend without its own figure has accepted and not yet prefilled."""

from engines.unprefilled import UnprefilledPrompts


def test_a_prompt_counts_from_its_submission_until_its_first_output():
    prompts = UnprefilledPrompts()
    prompts.add("a", 100)
    prompts.add("b", 30)
    assert prompts.total == 130

    prompts.done("a")  # a's first output
    assert prompts.total == 30

    prompts.done("a")  # a's end: already counted out
    prompts.done("b")  # b ended (cancelled, failed) before any output
    assert prompts.total == 0


def test_the_same_request_id_added_twice_counts_once():
    prompts = UnprefilledPrompts()
    prompts.add("a", 100)
    prompts.add("a", 100)
    assert prompts.total == 100
