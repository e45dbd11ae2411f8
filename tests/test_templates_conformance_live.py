"""Every template of the build's sdist (``models/templates/``), three conversations each, against
the real server: replayer's render equals ``/apply-template`` byte for byte and its ids equal
``/tokenize``, or both refuse. One router-mode server per build (``conformance.Router``).

The templates the server prepares for with its own per-model handlers, not reproduced yet, are
listed in ``KNOWN`` with the reason (docs/templates.md); they must still differ (a fix shows up
as a failure to update the list), and everything else must conform.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from replayer.core.builds import manager
from replayer.core.prompt import conformance

pytestmark = pytest.mark.live

#: (template, conversation) → why the server's render differs (per build, read in chat.cpp).
#: Empty: Apertus (enable_thinking false on the server) renders as the server's since
#: ``reasoning_analysis``, exact live on b9859, b10001 and b11434 (2026-12-03). A template that
#: differs goes here with its reason; one that becomes exact makes this test say "drop from KNOWN".
KNOWN: dict[int, dict] = {10001: {}, 11434: {}}
#: two builds with different reasoning defaults (b10001: past reasoning dropped; b11434: kept)
BUILDS = (10001, 11434)


@pytest.fixture(scope="module", params=BUILDS)
def outcomes(request, tmp_path_factory):
    build = request.param
    binary = Path(manager.install(build, "cpu").binary)
    return build, conformance.run(build, binary, tmp_path_factory.mktemp(f"conf-{build}"))


def test_every_sdist_template_renders_and_tokenizes_as_the_server(outcomes):
    build, found = outcomes
    n_templates = len({o.template for o in found})
    assert n_templates >= 55 and len(found) == 3 * n_templates
    known = KNOWN[build]
    wrong = [o for o in found if o.result not in ("exact", "both-refuse") and (o.template, o.conversation) not in known]
    assert not wrong, "\n".join(f"{o.template} {o.conversation}: {o.result} {o.detail}" for o in wrong[:10])
    fixed = [k for k in known if any((o.template, o.conversation) == k and o.result == "exact" for o in found)]
    assert not fixed, f"now exact, drop from KNOWN: {fixed}"
    assert sum(o.result == "exact" for o in found) >= 150
    # the tokenizer never disagrees on a text both rendered alike
    assert not [o for o in found if o.result == "ids-differ"]


#: (vocabulary GGUF of the sdist, pre-tokenizer name written over its own): DeepSeek LLM's and
#: DeepSeek Coder's own vocabularies. DeepSeek-V3's vocabulary is not in the sdist; its split
#: (``deepseek-v3``) over DeepSeek LLM's vocabulary was tried and gives the same ids as
#: DeepSeek LLM's own split on every text tried (that vocabulary has no merge across the pieces
#: where the two splits differ), so it would check nothing more and is not a case here.
DEEPSEEK_VOCABS = [("deepseek-llm", None), ("deepseek-coder", None)]


@pytest.mark.parametrize("vocab, pre", DEEPSEEK_VOCABS)
@pytest.mark.parametrize("build", BUILDS)
def test_deepseek_templates_with_deepseek_vocabularies(tmp_path, build, vocab, pre):
    """Every DeepSeek template of the sdist carried by a DeepSeek vocabulary, with the
    templates' own ``<｜…｜>`` markers added as control tokens as DeepSeek's tokenizers have
    them: replayer's text and ids equal the server's."""
    binary = Path(manager.install(build, "cpu").binary)
    files = conformance.template_files(manager.sdist_models_dir(build))
    names = [n for n in files if "deepseek" in n.lower()]
    specials = tuple(sorted({m for n in names for m in re.findall("<｜[^｜<>]+｜>", files[n].read_text("utf-8"))}))
    assert len(names) >= 6 and len(specials) >= 4
    found = conformance.run(build, binary, tmp_path, only=names, vocab=vocab, pre=pre, specials=specials)
    assert {o.template for o in found} == set(names) and len(found) == 3 * len(names)
    wrong = [o for o in found if o.result not in ("exact", "both-refuse")]
    assert not wrong, "\n".join(f"{o.template} {o.conversation}: {o.result} {o.detail}" for o in wrong[:10])
    assert sum(o.result == "exact" for o in found) >= 2 * len(names)
