"""Library constants, one row per kernel-library generation (``stack``), each read from its own tree.

A :class:`StackConstants` row is a frozen copy of the numbers and layout rules the ledger needs from one
generation, with the tree and commit it was read from (:class:`TreeRef`). Every row is proven equal to its
tree's own code by ``tests/ledger/test_generations.py`` against ``tests/fixtures/generations/<stack>.json``
(what ``scripts/record_generation.py`` recorded by running that tree's layout code, with file:line
provenance of every constant); docs/memory-model.md §10 says what changed between generations.
The pools' world sizes are the one table validation also reads (:mod:`glmlaunch.config.worldsizes`).

* ``sparkinfer-r14``: SparkInfer de04125 (the r12 release tree; r13-r16 carry byte-identical memory code).
* ``sparkinfer-r28``: SparkInfer 272a84bd + PR 106 + PR 117 (tree 200c1db7, releases r17-r28): the one-shot
  and DCP A2A ``Signal`` structs gained an ``alignas(128)`` staging generation; the pools check SM
  residency for ``max_concurrent_channels`` grids; vLLM PR 216 names the graph channels per pass.
* ``b12x-r29``: B12X 680d8195 + PR 125 (tree 6bc35fdb, r29-r31; PyPI b12x 1.2.1): CuTe-DSL pools whose
  DCP signals are sized for 16 ranks.
* ``b12x-r32``: B12X 7cecbb2c + PR 125/133/144 (tree cd3ce190, r32-r34; PyPI b12x 1.2.4): the one-shot eager
  slot is sharded per source rank by default at TP8 and on opt-in at TP2/TP4.
* ``b12x-ii``: B12X master c25cdba2 + PR 145/221/223/227-230 (tree 75787c7a, Infernal Invocation
  ii-r16-r18): r32's pool code; the vLLM base of the line names its channels as r17+ does.
* ``b12x-1.5``: PyPI b12x 1.5.x, which no release runs (the package the test extra installs; its own
  cross-check is ``tests/ledger/test_ledger_b12x.py``). When ``--library b12x`` imports it,
  :mod:`glmlaunch.ledger.b12x_bridge` replaces this row with the installed library's own values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from glmlaunch.config.worldsizes import DCP_A2A_WORLD_SIZES, ONESHOT_WORLD_SIZES

KIB = 1024
MIB = 1024 * 1024

#: How the one-shot eager slot is sharded: ``push`` (W shards iff push mode), ``push+topology`` (r32+:
#: also TP2/TP4 remote push on opt-in and TP8 owner reduce by default), ``pypi-1.5`` (b12x 1.5's
#: transport policy: TP2 plain peer push adds 2 incoming shards, TP8 owner reduce W shards).
ShardRule = Literal["push", "push+topology", "pypi-1.5"]

_DOCKER = "local-inference-lab/blackwell-llm-docker"
_DOCKER_COMMIT = "3dd078a7047800cf132e6e4b834d9d96b781af5f"


@dataclass(frozen=True, slots=True)
class TreeRef:
    """Where a generation's constants were read: a commit, or a base plus an integration patch."""

    repo: str
    #: the git tree hash of the library as the release builds it (``git write-tree`` of base + patch)
    tree: str
    #: the commit itself when the tree is one (no integration patch)
    commit: str | None = None
    base: str | None = None
    pull_requests: tuple[str, ...] = ()
    #: ``repo@commit:path`` of the release's integration patch applied to ``base``
    patch: str | None = None
    patch_sha256: str | None = None
    #: the PyPI release whose memory modules equal this tree, where one does
    pypi: str | None = None

    def short(self) -> str:
        """One line for a plan header: ``<repo> tree 200c1db7 = 272a84bd + PR 106 + PR 117``, or
        ``<repo>@<commit>``."""
        if self.commit is not None:
            return f"{self.repo}@{self.commit[:12]}"
        text = f"{self.repo} tree {self.tree[:8]}"
        if self.base is not None:
            prs = "".join(f" + PR {p.split()[0].lstrip('#')}" for p in self.pull_requests)
            text += f" = {self.base[:8]}{prs}"
        if self.pypi:
            text += f" (= PyPI {self.pypi})"
        return text


@dataclass(frozen=True, slots=True)
class StackConstants:
    stack: str
    version: str
    source: str
    tree: TreeRef
    #: the releases this generation covers ("r17-r28"); "no release" for a lab row
    releases: str
    env_prefix: str
    ipc_align: int
    # one-shot all-reduce (pcie_oneshot)
    oneshot_signal_bytes: int
    oneshot_rank_data_bytes: int
    oneshot_rank_data_used_bytes: int
    oneshot_world_sizes: tuple[int, ...]
    oneshot_shard_rule: ShardRule
    #: SMs one one-shot grid needs resident (0: no residency check in this generation)
    oneshot_required_sms: int
    # DMA ring all-reduce (pcie_dma)
    dma_flag_slots: int
    dma_flag_stride: int
    dma_scratch_align: int
    dma_fp8_quant_block: int
    dma_min_world_size: int
    dma_world_sizes: tuple[int, ...] | None
    # DCP all-to-all (pcie_dcp_a2a)
    dcp_a2a_signal_bytes: int
    dcp_a2a_signal_origin: str
    dcp_a2a_world_sizes: tuple[int, ...]
    dcp_a2a_required_sms: int
    # DCP top-k owner exchange (pcie_dcp_topk)
    dcp_topk_signal_bytes: int
    dcp_topk_world_sizes: tuple[int, ...]
    # paged indexer scratch (nsa_indexer / dsa_indexer scratch.py)
    indexer_scratch_align: int
    indexer_tile_block_q: int
    indexer_tile_block_k: int
    indexer_supertile_default: int
    indexer_head_dim: int
    indexer_scale_bytes: int
    indexer_fused_max_rows_glm32: int
    indexer_fused_max_rows: int
    indexer_fused_merge_state_bytes_per_row: int
    #: head counts of the top-k-512 fused rule (sm120/121 only, rows <= 16)
    indexer_fused_c4_heads: tuple[int, ...]
    # two-level fold (paged.py)
    fold_slice_tokens: int
    fold_max_slices: int
    fold_budget_mib_default: int
    page_size: int
    # the vLLM integration of the generation's releases
    #: vLLM PR 216: one channel per named pass (eager, target profile/production, the draft's passes),
    #: profiling channels rolled back on both runners; before it, one new channel per capture() entry
    semantic_channels: bool
    #: what vLLM passes as max_concurrent_channels (an SM-residency check, not a cap on live channels)
    max_concurrent_channels: int

    @property
    def library(self) -> str:
        return "sparkinfer" if self.env_prefix == "SPARKINFER_" else "b12x"


SPARKINFER_R14 = StackConstants(
    stack="sparkinfer-r14",
    version="de04125508c75e748016493f851e6bd4513b515b",
    source="built-in table: SparkInfer de04125 (releases r12-r16)",
    tree=TreeRef(
        repo="local-inference-lab/sparkinfer",
        tree="35aebc6d46a0d3d4f7275b81251211864f410269",
        commit="de04125508c75e748016493f851e6bd4513b515b",
    ),
    releases="r12-r16",
    env_prefix="SPARKINFER_",
    ipc_align=256,
    oneshot_signal_bytes=150_528,
    oneshot_rank_data_bytes=8 * MIB,
    oneshot_rank_data_used_bytes=2 * 128,  # two RankData records of kMaxRanks=16 pointers
    oneshot_world_sizes=ONESHOT_WORLD_SIZES["sparkinfer-r14"],
    oneshot_shard_rule="push",
    oneshot_required_sms=0,
    dma_flag_slots=256,
    dma_flag_stride=128,
    dma_scratch_align=256,
    dma_fp8_quant_block=128,
    dma_min_world_size=2,
    dma_world_sizes=None,
    # sizeof(Signal) (kMaxBlocks 64, kMaxRanks 8), also measured as meta_size() on 2x H200
    dcp_a2a_signal_bytes=133_120,
    dcp_a2a_signal_origin="sizeof(Signal) at de04125 (pcie_dcp_a2a.cu:68)",
    dcp_a2a_world_sizes=DCP_A2A_WORLD_SIZES["sparkinfer-r14"],
    dcp_a2a_required_sms=0,
    dcp_topk_signal_bytes=266_240,
    dcp_topk_world_sizes=(2, 3, 4, 6, 8),
    indexer_scratch_align=1024,
    indexer_tile_block_q=32,
    indexer_tile_block_k=512,
    indexer_supertile_default=32 * 1024,
    indexer_head_dim=128,
    indexer_scale_bytes=4,
    indexer_fused_max_rows_glm32=16,
    indexer_fused_max_rows=6,
    indexer_fused_merge_state_bytes_per_row=3088,  # _STATE_WORDS = 3 * 256 + 4 int32 words
    indexer_fused_c4_heads=(64,),
    fold_slice_tokens=16 * 1024,
    fold_max_slices=32,
    fold_budget_mib_default=256,
    page_size=64,
    semantic_channels=False,
    max_concurrent_channels=1,
)

#: The r28 appliance's SparkInfer: the one-shot and DCP A2A ``Signal`` structs each gained an
#: ``alignas(128)`` staging generation (pcie_oneshot.cu:80-82, pcie_dcp_a2a.cu:80-81; sizes by g++ sizeof);
#: the pools refuse devices that cannot keep max_concurrent_channels grids resident.
SPARKINFER_R28 = replace(
    SPARKINFER_R14,
    stack="sparkinfer-r28",
    version="200c1db7ef98ff8bbfd4f621555326e20f42282e",
    source="built-in table: SparkInfer tree 200c1db7 (releases r17-r28)",
    tree=TreeRef(
        repo="local-inference-lab/sparkinfer",
        tree="200c1db7ef98ff8bbfd4f621555326e20f42282e",
        base="272a84bd97ce791a1e92d1f3a0da3dd5f3c6565f",
        pull_requests=(
            "#106 35588fb570d23713bcb2a81749d0fdf3c4396ace",
            "#117 c40eb08f1c612816d111a94870fa59e5e7b4acbe",
        ),
        patch=f"{_DOCKER}@{_DOCKER_COMMIT}:patches/releases/gilded-gnosis-v20-r28/sparkinfer/integration.patch",
        patch_sha256="5669173aeabc1307e21f427480451c82e34c63d0003c61aebd2e6526b3aee7ae",
    ),
    releases="r17-r28",
    oneshot_signal_bytes=150_656,
    oneshot_required_sms=36,
    dcp_a2a_signal_bytes=133_248,
    dcp_a2a_signal_origin="sizeof(Signal) at 200c1db7 (pcie_dcp_a2a.cu:80)",
    dcp_a2a_required_sms=64,
    semantic_channels=True,
    max_concurrent_channels=2,
    oneshot_world_sizes=ONESHOT_WORLD_SIZES["sparkinfer-r28"],
    dcp_a2a_world_sizes=DCP_A2A_WORLD_SIZES["sparkinfer-r28"],
)

#: B12X from r29: CuTe-DSL pools (no nvcc), Python-sized signals for 16 ranks, DMA world sizes listed.
B12X_R29 = replace(
    SPARKINFER_R28,
    stack="b12x-r29",
    version="6bc35fdb76b6f9d11601009fe413720b461fb444",
    source="built-in table: B12X tree 6bc35fdb (releases r29-r31, PyPI b12x 1.2.1)",
    tree=TreeRef(
        repo="local-inference-lab/b12x",
        tree="6bc35fdb76b6f9d11601009fe413720b461fb444",
        base="680d8195b80420296d7fed2688b75406be15eb38",
        pull_requests=("#125 282d61a483c908eaa440a19ba0d70a557c73197f",),
        patch=f"{_DOCKER}@{_DOCKER_COMMIT}:patches/releases/gilded-gnosis-v20-r29/b12x/integration.patch",
        patch_sha256="d0be92a19018f9291eb3ed09880ca9d016c4c3fb1387257e485d1d3c61606e35",
        pypi="b12x==1.2.1",
    ),
    releases="r29-r31",
    env_prefix="B12X_",
    oneshot_signal_bytes=150_528,
    dma_world_sizes=(2, 4, 6, 8, 10),
    # (64 blocks * 16 ranks + 2 * 64 * 16 * 32 flag words) * 4 B
    dcp_a2a_signal_bytes=(64 * 16 + 2 * 64 * 16 * 32) * 4,
    dcp_a2a_signal_origin="_SIGNAL_BYTES at 6bc35fdb (pcie_dcp_a2a.py:47)",
    dcp_a2a_world_sizes=DCP_A2A_WORLD_SIZES["b12x-r29"],
    # signal_bytes(128 blocks), 16 ranks
    dcp_topk_signal_bytes=(128 * 16 + 2 * 128 * 16 * 32) * 4,
    oneshot_world_sizes=ONESHOT_WORLD_SIZES["b12x-r29"],
)

B12X_R32 = replace(
    B12X_R29,
    stack="b12x-r32",
    version="cd3ce190f0f1917402cdfd5773724267cc9a63f8",
    source="built-in table: B12X tree cd3ce190 (releases r32-r34, PyPI b12x 1.2.4)",
    tree=TreeRef(
        repo="local-inference-lab/b12x",
        tree="cd3ce190f0f1917402cdfd5773724267cc9a63f8",
        base="7cecbb2c4819636ae7f05f8b116f2c45ee2cff7b",
        pull_requests=(
            "#125 282d61a483c908eaa440a19ba0d70a557c73197f",
            "#133 287fec1c8e6457a5d687f0b7a96a4e1579c1b791",
            "#144 c8d5f33b4a682a4a0b06e29c816aa24e28313473",
        ),
        patch=f"{_DOCKER}@{_DOCKER_COMMIT}:patches/releases/gilded-gnosis-v20-r34/b12x/integration.patch",
        patch_sha256="406970efd643f5a7d1c989b7d988331b16ab7e84d868cf2d9cbabb7707633687",
        pypi="b12x==1.2.4",
    ),
    releases="r32-r34",
    dcp_a2a_signal_origin="_SIGNAL_BYTES at cd3ce190 (pcie_dcp_a2a.py:47)",
    oneshot_shard_rule="push+topology",
    oneshot_world_sizes=ONESHOT_WORLD_SIZES["b12x-r32"],
    dcp_a2a_world_sizes=DCP_A2A_WORLD_SIZES["b12x-r32"],
)

#: Infernal Invocation r16-r18: B12X master c25cdba2 + the r18 integration (tree 75787c7a, pyproject 1.2.3).
#: Its pool, DMA, DCP top-k/A2A, indexer and fold code computes what r32's does (the recorded layouts are
#: identical); it reads five names more and two fewer (glmlaunch/config/library_env.json). The channel
#: model is in the ii vLLM base (dev/infernal-invocation), not in the r18 delta: named channels and two
#: concurrent, as the context lines of the same branch's kimi-k3-qsrt-ii-r3 patch show
#: (tests/fixtures/generations/b12x-ii.json, ``vllm``).
B12X_II = replace(
    B12X_R32,
    stack="b12x-ii",
    version="75787c7a7431b3bea414d2ebf5f2b8671b23eb33",
    source="built-in table: B12X master tree 75787c7a (Infernal Invocation ii-r16-r18, pyproject 1.2.3)",
    tree=TreeRef(
        repo="local-inference-lab/b12x",
        tree="75787c7a7431b3bea414d2ebf5f2b8671b23eb33",
        base="c25cdba2c1df7a69b2d7771e4243e12a8fbf19d5",
        pull_requests=(
            "#145 7f88972df71d580951115220b75923078b769fe8",
            "#221 413f96e889dad1ae0752fd1f4be9d37f56849600",
            "#223 3df80ee36e2a060b602897b00af377687efd9118",
            "#227 e38436d76a95c586c57e06646f8ea5b8c8ed11c7",
            "#228 50046df84a15cc5f76b94260e897fd39072b2fdf",
            "#229 2cdd9e265cd6c4dca43e7d42c5a8cb265c92adfb",
            "#230 156920046e858f413db0c51e53cd25b9020d5f40",
        ),
        patch=f"{_DOCKER}@{_DOCKER_COMMIT}:patches/releases/infernal-invocation-r18/b12x/integration.patch",
        patch_sha256="079a94dd2ed43ce004a2fa581283fcd45ddce4b0b216ac34c6c896ecdd6fcc7a",
    ),
    releases="ii-r16-r18",
    dcp_a2a_signal_origin="_SIGNAL_BYTES at 75787c7a (pcie_dcp_a2a.py:47)",
)

B12X_15 = replace(
    B12X_R29,
    stack="b12x-1.5",
    version="1.5.1",
    source="built-in table: PyPI b12x 1.5.x (no release runs it)",
    tree=TreeRef(repo="pypi:b12x", tree="1.5.1", pypi="b12x==1.5.1"),
    releases="no release",
    oneshot_shard_rule="pypi-1.5",
    dcp_a2a_signal_origin="b12x.comm.pcie.pcie_dcp_a2a._SIGNAL_BYTES",
    dcp_a2a_world_sizes=DCP_A2A_WORLD_SIZES["b12x-1.5"],
    # _COOP_STATE_WORDS = 8968 int32 words per row
    indexer_fused_merge_state_bytes_per_row=8968 * 4,
    indexer_fused_c4_heads=(32, 64),
    oneshot_world_sizes=ONESHOT_WORLD_SIZES["b12x-1.5"],
)

#: The seed's re-review arithmetic for the DCP A2A signal region (reproduces 14,205,952 B).
SEED_DCP_A2A_SIGNAL_BYTES = 1024

TABLE: dict[str, StackConstants] = {
    k.stack: k for k in (SPARKINFER_R14, SPARKINFER_R28, B12X_R29, B12X_R32, B12X_II, B12X_15)
}


def for_stack(stack: str) -> StackConstants:
    from glmlaunch.config.releases import canonical_stack

    return TABLE[canonical_stack(stack)]
