"""Predict what is missing: the predictions of one model on one benchmark, sharded over ranks, resumed
from the run's results file, and shared through the results cache.

A result record is what the model said (a generated answer, or the log-likelihoods of the item's
completions for a ``loglikelihood`` benchmark) and how it was produced::

    {"id", "prediction", "meta", "protocol", "setting", "item"}   (+ "truncated_answer", "simulation")

``setting`` is a digest of everything but the weights that changes the prediction (the benchmark and its
version, its generation settings, the media spec, the family's chat format, the dtype) and ``item`` one of
the item itself (``eval.results_cache.item_fingerprint``). A stored record counts for an item only when
both match: anything else is generated again. Records are appended to
``<run_dir>/eval/<model>/<benchmark>.jsonl`` after every round of batches, so a kill loses at most a round.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tqdm import tqdm

from core import distributed
from core.config import OviProtocol
from core.files import JsonlStore
from core.sample import Sample
from eval.benchmarks.base import Benchmark, Kind, Settings
from eval.predictor import Predictor
from eval.results_cache import ResultsCache

LOGLIKELIHOOD = "loglikelihood"  # the protocol field of a log-likelihood record


def current_records(
    stored: dict[str, dict], samples: list[Sample], setting: str, items: dict[str, str]
) -> dict[str, dict]:
    """The stored records (a results file as read, by id) that answer these very items under this setting,
    by id (``items``: each sample's fingerprint)."""
    return {
        sample.id: stored[sample.id]
        for sample in samples
        if sample.id in stored
        and stored[sample.id].get("setting") == setting
        and stored[sample.id].get("item") == items[sample.id]
    }


class Generation:
    """Makes one model's missing predictions on one benchmark.

    Every rank of a multi-process run calls :meth:`run` (each predicts its shard); rank 0 reads and
    writes the results file and the cache, and returns the records.

    Args:
        bench: the benchmark; samples: its (media-checked) items; settings: its settings.
        batch_size: items per batch (a log-likelihood benchmark's: conversations per batch).
        setting: the digest every record is stamped with; items: each sample's fingerprint.
    """

    def __init__(
        self,
        bench: Benchmark,
        samples: list[Sample],
        settings: Settings,
        batch_size: int,
        setting: str,
        items: dict[str, str],
    ):
        self.bench, self.samples, self.settings = bench, samples, settings
        self.batch_size, self.setting, self.items = batch_size, setting, items

    def run(
        self,
        predictor: Predictor,
        results: JsonlStore | None,
        cache: ResultsCache | None = None,
        cache_key: str | None = None,
        desc: str = "",
    ) -> dict[str, dict]:
        """The current record of every item, generating those that lack one (rank 0; others: ``{}``).

        Args:
            predictor: what answers (``eval.predictor``).
            results: the run's results file of this model and benchmark (rank 0).
            cache, cache_key: the shared results cache and this model's key in it (rank 0; None: unused).
        """
        main = distributed.is_main()
        done = current_records(results.read(), self.samples, self.setting, self.items) if main else {}
        missing = [s for s in self.samples if s.id not in done]
        if main and cache is not None and cache_key:
            reused = cache.lookup(cache_key, self.bench.name, {s.id: self.items[s.id] for s in missing})
            self._keep(results, done, list(reused.values()))
            missing = [s for s in missing if s.id not in reused]
        by_id = {s.id: s for s in self.samples}
        # Rank 0 alone reads the file and tells the others what is missing, so all shard the same list.
        todo = [by_id[i] for i in distributed.broadcast([s.id for s in missing] if main else None)]
        rounds = list(self._shard_batches(todo))
        for group, chunk, real in tqdm(rounds, desc=desc, unit="batch", disable=not main):
            records = self._predict(predictor, chunk, group)
            mine = [record for record, keep in zip(records, real, strict=True) if keep]
            gathered = [self._stamped(r) for shard in distributed.gather(mine) for r in shard]
            if main:
                self._keep(results, done, gathered)
                if cache is not None and cache_key:
                    cache.store(cache_key, self.bench.name, gathered)
        return {s.id: done[s.id] for s in self.samples} if main else {}

    @staticmethod
    def _keep(results: JsonlStore, done: dict[str, dict], records: list[dict]) -> None:
        results.append(records)
        done.update((record["id"], record) for record in records)

    def _stamped(self, record: dict) -> dict:
        return {**record, "setting": self.setting, "item": self.items[record["id"]]}

    def _groups(self, samples: list[Sample]) -> list[tuple[tuple, list[Sample]]]:
        """Samples grouped by protocol, generation length and the media of each user turn: short answers
        never wait for long ones, simulated items never share a batch, and under several ranks every rank
        runs the vision tower at the same steps (ZeRO-3 gathers its weights from all of them)."""
        groups: dict[tuple, list[Sample]] = {}
        for sample in samples:
            groups.setdefault((*self._how(sample), _media_per_turn(sample)), []).append(sample)
        return list(groups.items())

    def _how(self, sample: Sample) -> tuple[str, int]:
        """``(protocol, new tokens)`` of an item: generated under a protocol, or scored (no new tokens)."""
        if self.bench.kind is Kind.loglikelihood:
            return LOGLIKELIHOOD, 0
        meta = sample.meta
        return self.bench.protocol(meta, self.settings), self.bench.max_new_tokens(meta, self.settings)

    def _shard_batches(self, samples: list[Sample]) -> Iterator[tuple[tuple, list[Sample], list[bool]]]:
        """``(group key, batch, real)`` rounds of this rank's shard; every rank yields the same number of
        rounds with batches of the same size (a rank short of items pads with a repeat, ``real`` False).

        All ranks must make the same generate calls in the same order: under ZeRO-3 each forward pass
        gathers weights from all ranks, so a rank that stopped early would leave the others hanging.
        """
        for key, group in self._groups(samples):
            size = self.batch_size
            if self.bench.kind is Kind.loglikelihood:  # each item is several conversations
                size = max(1, size // len(self.bench.requests(group[0])))
            mine, real = distributed.shard(group)
            for start in range(0, len(mine), size):
                yield key, mine[start : start + size], real[start : start + size]

    def _predict(self, predictor: Predictor, chunk: list[Sample], group: tuple) -> list[dict]:
        protocol, length, _ = group
        if protocol == LOGLIKELIHOOD:
            fields = self._loglikelihoods(predictor, chunk)
        else:
            fields = predictor.generate(chunk, protocol, length)
        return [_record(s, protocol, f) for s, f in zip(chunk, fields, strict=True)]

    def _loglikelihoods(self, predictor: Predictor, chunk: list[Sample]) -> list[dict]:
        """Each item's prediction: the log-likelihoods of its requests, in order, asked in one batch."""
        requests = [self.bench.requests(sample) for sample in chunk]
        flat = predictor.loglikelihood([r for item in requests for r in item])
        fields, start = [], 0
        for item in requests:
            fields.append({"prediction": flat[start : start + len(item)]})
            start += len(item)
        return fields


def _media_per_turn(sample: Sample) -> tuple[tuple[str, ...], ...]:
    """The kinds of media each user turn holds, e.g. ``(("video",), ())``."""
    return tuple(
        tuple(sorted({part.type for part in turn.parts} - {"text"}))
        for turn in sample.turns
        if turn.role == "user"
    )


def _record(sample: Sample, protocol: OviProtocol | str, fields: dict[str, Any]) -> dict[str, Any]:
    """A result record: the item, how it was answered, and the answer's fields."""
    first = {
        "id": sample.id,
        "prediction": fields["prediction"],
        "meta": sample.meta,
        "protocol": str(protocol),
    }
    return {**first, **fields}
