"""How many bytes a slot's state takes in the host prompt cache: the real sizes of the model.

``--cache-ram`` is a limit in MiB on the sum of the saved states (``server_prompt::size()``:
the sequence state ``llama_state_seq_get_size_ext`` plus each saved checkpoint's size), so
which entry is evicted when depends on the model's state per token and per checkpoint.
Both follow from the GGUF header, as the memory modules write them
(``src/llama-kv-cache.cpp`` ``state_write``/``state_write_meta``/``state_write_data``,
``src/llama-memory-recurrent.cpp`` ``state_write``): per cell 12 bytes of metadata (position,
sequence count, the sequence id) and the K and V rows of each attention layer; SWA layers
keep only the cells inside the window; recurrent layers one fixed state. The server logs
the real figure when it saves ("saving prompt with length N, total state size = X MiB"),
which ``logfacts`` reads and the live tests compare.
"""

from __future__ import annotations

from dataclasses import dataclass

from replayer.core.hardware.gguf_model import GGUFModel

__all__ = ["StateSize", "from_gguf"]

_KV_HEADER = 4 + 4 + 4 + 4  # n_stream, cell_count, v_trans, n_layer
_LAYER_HEADER = 2 * (4 + 8)  # K and V: type, row size
_CELL_META = 4 + 4 + 4  # pos, n_seq_id, the one seq_id


@dataclass(frozen=True)
class StateSize:
    """A model's saved-state sizes in bytes."""

    per_token: int  # each cached token: metadata + K/V of the full-attention layers
    fixed: int  # whatever the length: headers and the recurrent layers' state
    swa_per_token: int = 0  # a token inside the sliding window, on the SWA layers
    swa_cells: int = 0  # the window: SWA layers save at most this many cells
    checkpoint: int = 0  # one context checkpoint (partial state)

    def of(self, n_tokens: int, n_checkpoints: int = 0) -> int:
        """A saved prompt of ``n_tokens`` with ``n_checkpoints`` checkpoints (``server_prompt::size``)."""
        if n_tokens <= 0:
            return 0
        swa = min(n_tokens, self.swa_cells) * self.swa_per_token if self.swa_cells else 0
        return self.fixed + n_tokens * self.per_token + swa + n_checkpoints * self.checkpoint

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def from_gguf(m: GGUFModel) -> StateSize:
    """The sizes of ``m`` with llama-server's default f16 K/V cache."""
    attn = m.attn_layers
    full = [i for i in attn if not m.swa_layers[i]]
    swa = [i for i in attn if m.swa_layers[i]]
    fixed = 0
    per_token = 0
    if full or not swa:
        fixed += _KV_HEADER + _LAYER_HEADER * len(full)
        per_token = _CELL_META + m.kv_bytes_per_cell(full) if full else 0
    swa_tok = 0
    if swa:
        fixed += _KV_HEADER + _LAYER_HEADER * len(swa)
        swa_tok = _CELL_META + m.kv_bytes_per_cell(swa)
    if any(m.recurrent_layers):
        n_recr = sum(m.recurrent_layers)
        fixed += 4 + 4 + _CELL_META + 8 + n_recr * (24 + m.state_floats_per_layer * 4)
    ckpt = round(m.checkpoint_mib() * 2**20)
    return StateSize(per_token, fixed, swa_tok, m.n_swa if swa else 0, ckpt)
