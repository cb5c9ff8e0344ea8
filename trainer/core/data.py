"""Byte-level text that every machine has: Python's own standard-library sources, or the user's files.

Whole files are held out for validation. The rest is split into one shard per island, either IID
(the text cut into chunks dealt round-robin to the islands) or non-IID (whole files per island, in
path order, so each island sees different packages). Each island reads its shard in epochs of
whole windows in a seeded random order, no window twice within an epoch (``BatchSampler``), its
ranks sharing the order; the sampler's state is the data position saved in a checkpoint.

The standard-library corpus depends on the Python version: machines of a multi-machine run must
use the same one (or pass the same ``trainer.data_path``).
"""

from __future__ import annotations

import os
import random
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

from islands.errors import UserError

IID_CHUNK_BYTES = 4096
SKIPPED_FOLDERS = {"site-packages", "dist-packages", "__pycache__"}


@dataclass(frozen=True)
class Document:
    name: str
    data: bytes


def stdlib_documents(max_bytes: int, seed: int) -> list[Document]:
    """Standard-library ``.py`` files in a seeded shuffle of their sorted paths, up to ``max_bytes``."""
    root = Path(sysconfig.get_paths()["stdlib"])
    paths = sorted(python_files(root))
    random.Random(seed).shuffle(paths)
    documents, total = [], 0
    for path in paths:
        if total >= max_bytes:
            break
        data = path.read_bytes()
        documents.append(Document(str(path.relative_to(root)), data))
        total += len(data)
    return documents


def python_files(root: Path) -> list[Path]:
    """``.py`` files under ``root``, not descending into installed packages."""
    found: list[Path] = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [name for name in subfolders if name not in SKIPPED_FOLDERS]
        found.extend(Path(folder) / name for name in files if name.endswith(".py"))
    return found


def is_text(data: bytes) -> bool:
    if not data or b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def user_documents(data_path: str) -> list[Document]:
    """Every UTF-8 text file under ``data_path`` (a file or a folder), in path order."""
    root = Path(data_path)
    if not root.exists():
        raise UserError(f"{data_path}: no such file or folder (trainer.data_path / --data)")
    paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    documents = []
    for path in paths:
        data = path.read_bytes()
        if is_text(data):
            documents.append(
                Document(str(path.relative_to(root)) if path != root else path.name, data)
            )
    if not documents:
        raise UserError(
            f"{data_path}: holds no UTF-8 text file to train on (trainer.data_path / --data)"
        )
    return documents


def split_validation(
    documents: list[Document], val_fraction: float, seed: int, source: str
) -> tuple[list[Document], list[Document]]:
    """Hold out whole documents (chosen by a seeded shuffle) until ``val_fraction`` of the bytes; a
    single document (``--data FILE``) is cut instead: its last ``val_fraction`` of bytes, from a line
    start where there is one, is the validation text."""
    if len(documents) == 1:
        return split_one(documents[0], val_fraction, source)
    order = list(range(len(documents)))
    random.Random(seed + 1).shuffle(order)
    target = val_fraction * sum(len(d.data) for d in documents)
    held, held_bytes = set(), 0
    for index in order[:-1]:
        if held_bytes >= target:
            break
        held.add(index)
        held_bytes += len(documents[index].data)
    train = [d for i, d in enumerate(documents) if i not in held]
    val = [d for i, d in enumerate(documents) if i in held]
    return train, val


def split_one(
    document: Document, val_fraction: float, source: str
) -> tuple[list[Document], list[Document]]:
    data = document.data
    cut = len(data) - max(1, int(val_fraction * len(data)))
    line_start = data.find(b"\n", cut) + 1
    if 0 < line_start < len(data):
        cut = line_start
    if cut <= 0:
        raise UserError(f"{source}: too little text to hold out a validation part")
    return [Document(document.name, data[:cut])], [
        Document(document.name + " (held out)", data[cut:])
    ]


def to_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def iid_shards(documents: list[Document], islands: int) -> list[torch.Tensor]:
    """Concatenate, cut into chunks of ``IID_CHUNK_BYTES`` and deal chunk k to island k mod M."""
    stream = to_tensor(b"".join(d.data for d in documents))
    chunks = list(stream.split(IID_CHUNK_BYTES))
    return [
        torch.cat(chunks[island::islands]) if chunks[island::islands] else stream[:0]
        for island in range(islands)
    ]


def file_shards(documents: list[Document], islands: int) -> list[torch.Tensor]:
    """Whole files in path order, cut into M runs of about equal bytes (non-IID: different packages)."""
    ordered = sorted(documents, key=lambda d: d.name)
    total = sum(len(d.data) for d in ordered)
    parts: list[list[bytes]] = [[] for _ in range(islands)]
    before = 0
    for document in ordered:
        parts[min(islands - 1, before * islands // total)].append(document.data)
        before += len(document.data)
    return [to_tensor(b"".join(part)) for part in parts]


@dataclass
class Corpus:
    shards: list[torch.Tensor]
    validation: torch.Tensor


def load_corpus(
    data_path: str,
    split: str,
    islands: int,
    block_size: int,
    max_bytes: int,
    val_fraction: float,
    seed: int,
) -> Corpus:
    """The shards and validation text for a run; raises ``UserError`` if some island gets too little."""
    source = data_path or "the standard-library corpus"
    documents = user_documents(data_path) if data_path else stdlib_documents(max_bytes, seed)
    train, val = split_validation(documents, val_fraction, seed, source)
    shards = iid_shards(train, islands) if split == "iid" else file_shards(train, islands)
    corpus = Corpus(shards=shards, validation=to_tensor(b"".join(d.data for d in val)))
    for name, text in [
        *((f"island {i}'s shard", s) for i, s in enumerate(shards)),
        ("validation", corpus.validation),
    ]:
        if text.numel() < block_size + 2:
            raise UserError(
                f"{source}: {name} has {text.numel()} bytes, fewer than block_size + 2 = "
                f"{block_size + 2} (add text or lower trainer.block_size)"
            )
    return corpus


def windows(
    text: torch.Tensor, offsets: torch.Tensor, block_size: int, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs text[o : o + T] and targets text[o + 1 : o + T + 1] for every offset o."""
    rows = torch.stack([text[o : o + block_size + 1] for o in offsets.tolist()]).long()
    return rows[:, :-1].contiguous().to(device), rows[:, 1:].contiguous().to(device)


class BatchSampler:
    """Windows of one shard in epochs without repeats, as the papers' data loaders read their shards:
    each epoch cuts the shard into whole windows of ``block_size`` + 1 bytes at a fresh random phase
    and deals them in a seeded random order; an island's ``ranks`` ranks share the order, rank
    ``rank`` taking its own ``batch_size`` windows of every step's ``ranks x batch_size``. The state
    (generator, this epoch's order, the position in it) is the data position."""

    def __init__(
        self,
        shard: torch.Tensor,
        batch_size: int,
        block_size: int,
        seed: int,
        device: torch.device | str = "cpu",
        rank: int = 0,
        ranks: int = 1,
    ):
        self.shard = shard
        self.batch_size = batch_size
        self.block_size = block_size
        self.device = device
        self.rank, self.ranks = rank, ranks
        self.generator = torch.Generator().manual_seed(seed)
        self.order = torch.zeros(0, dtype=torch.long)
        self.position = 0

    def new_epoch(self) -> None:
        """This epoch's window starts: phase + k x block_size for a random phase, in random order."""
        phase = int(torch.randint(0, self.block_size, (1,), generator=self.generator))
        windows = max(1, (self.shard.numel() - 1 - phase) // self.block_size)
        if (windows - 1) * self.block_size + phase + self.block_size + 1 > self.shard.numel():
            phase = 0  # a shard of about one window: the window from its start
        self.order = phase + self.block_size * torch.randperm(windows, generator=self.generator)
        self.position = 0

    def next_offsets(self) -> torch.Tensor:
        """The step's ``ranks x batch_size`` window starts (across epochs when this one runs out), this
        rank's part of them."""
        taken = []
        needed = self.ranks * self.batch_size
        while needed:
            if self.position >= self.order.numel():
                self.new_epoch()
            piece = self.order[self.position : self.position + needed]
            taken.append(piece)
            self.position += piece.numel()
            needed -= piece.numel()
        step = torch.cat(taken)
        return step[self.rank * self.batch_size : (self.rank + 1) * self.batch_size]

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        return windows(self.shard, self.next_offsets(), self.block_size, self.device)

    def state_dict(self) -> dict:
        return {
            "generator": self.generator.get_state(),
            "order": self.order.clone(),
            "position": self.position,
        }

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
        self.order = state["order"].clone()
        self.position = int(state["position"])


def sampler_seed(seed: int, island: int) -> int:
    """A distinct, reproducible stream per island (its ranks share it, each taking its own windows)."""
    return seed * 1_000_003 + island * 1_009 + 1


def validation_batches(
    text: torch.Tensor,
    count: int,
    batch_size: int,
    block_size: int,
    seed: int,
    device: torch.device | str = "cpu",
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The same ``count`` validation batches at every evaluation (fixed seed)."""
    sampler = BatchSampler(text, batch_size, block_size, seed + 7, device)
    return [sampler.next_batch() for _ in range(count)]
