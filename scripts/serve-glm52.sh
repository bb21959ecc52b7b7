#!/usr/bin/env bash
# Drop-in replacement for the old launcher chain (serve-gilded-gnosis.sh -> serve-glm52-v19.sh ->
# serve-glm52-v16.sh): reads the variables those scripts read, turns each one that is set into a
# glmlaunch --set override on a profile, and execs `glmlaunch serve`, which execs vLLM (signals reach
# vLLM as before). README.md "Migrating from the serve scripts" has the full mapping table.
#
#   MODEL_FAMILY=glm52 TP=4 DCP=2 MTP=5 scripts/serve-glm52.sh [-- extra vllm args]
#   GLMLAUNCH_PROFILE=turnkey DRY_RUN=1 scripts/serve-glm52.sh
#
# Only variables that are set (and not "auto") become overrides: every default lives in the profile
# (r12-exl3 unless GLMLAUNCH_PROFILE says otherwise), never here. Variables whose job glmlaunch now does
# differently are refused with the replacement, not silently ignored.
set -euo pipefail

die() {
  printf 'serve-glm52.sh: %s\n' "$*" >&2
  exit 2
}

args=()
set_opt() { args+=(--set "$1=$2"); }

# name of the old variable, the glmlaunch key
map_plain() {
  local var=$1 key=$2
  if [[ -n "${!var:-}" ]]; then
    set_opt "${key}" "${!var}"
  fi
}

# auto|0|1 (the v19 DCP policy knobs): auto leaves the library's choice, 0/1 become false/true.
map_bool_auto() {
  local var=$1 key=$2 value=${!1:-}
  case "${value}" in
    "" | auto) ;;
    0) set_opt "${key}" false ;;
    1) set_opt "${key}" true ;;
    *) die "${var} must be auto, 0 or 1 (got '${value}')" ;;
  esac
}

# auto|N: auto leaves the library's choice.
map_int_auto() {
  local var=$1 key=$2 value=${!1:-}
  if [[ -n "${value}" && "${value}" != auto ]]; then
    set_opt "${key}" "${value}"
  fi
}

case "${MODEL_FAMILY:-glm52}" in
  glm52 | glm5.2 | glm | glm52-exl3) ;;
  *) die "MODEL_FAMILY=${MODEL_FAMILY} is not served by glmlaunch (GLM-5.2 only: glm52, glm5.2, glm, glm52-exl3)" ;;
esac

# Old variables with no one-to-one successor: refuse them, all at once, with what to do instead.
gone=()
gone_if_set() {
  local var=$1 why=$2
  if [[ -n "${!var+set}" ]]; then
    gone+=("${var}: ${why}")
  fi
}
gone_if_set PCIE_CALIBRATION "calibration is no longer a boot-time side effect; run \`glmlaunch calibrate\` and the preflight (--skip-preflight / GLMLAUNCH_SKIP_PREFLIGHT=1 to skip it)"
gone_if_set PCIE_CALIBRATION_ONLY "use \`glmlaunch preflight\` (or \`glmlaunch calibrate\`) on its own"
gone_if_set PCIE_CALIBRATION_TIMEOUT "use \`glmlaunch preflight --timeout\`"
gone_if_set PCIE_CALIBRATION_CACHE_DIR "calibration records live in GLMLAUNCH_CACHE_DIR"
gone_if_set PCIE_CALIBRATOR "the torchrun calibrator is replaced by \`glmlaunch preflight\`"
gone_if_set DCP_CKV_PREFETCH_TOPOLOGY "the check stage reads the NVML topology and refuses CKV prefetch over SYS; set DCP_CKV_PREFETCH_DEPTH explicitly"
gone_if_set MOE_MODE "an NVFP4-checkpoint knob (B12X_MOE_FORCE_A8/A16); the EXL3 deployment does not read it — use the profile's env: section if you need it"
gone_if_set ONLINE_QUANT "NVFP4-checkpoint online quantisation; not part of the EXL3 deployment (profile vllm_args: --quantization-config)"
gone_if_set ONLINE_MXFP8 "see ONLINE_QUANT"
gone_if_set ONLINE_FP8 "see ONLINE_QUANT"
gone_if_set ONLINE_FP8_MXFP4 "see ONLINE_QUANT"
gone_if_set QUANTIZATION_CONFIG_JSON "see ONLINE_QUANT"
gone_if_set NF3_GRID188 "an NF3 hybrid-checkpoint knob; use the profile's env: section (VLLM_NF3_GRID188_DECODE)"
gone_if_set LINEAR_BACKEND "not modelled; pass --linear-backend after -- (it is not a managed flag)"
gone_if_set DCP_A2A_LARGE_BACKEND "not modelled; set VLLM_DCP_A2A_LARGE_BACKEND through GLMLAUNCH_ENV__VLLM_DCP_A2A_LARGE_BACKEND"
gone_if_set DCP_PREFILL_WORKSPACE "not modelled; set VLLM_DCP_PROJECT_BEFORE_MERGE through GLMLAUNCH_ENV__VLLM_DCP_PROJECT_BEFORE_MERGE"
if ((${#gone[@]})); then
  for line in "${gone[@]}"; do
    printf 'serve-glm52.sh: %s\n' "${line}" >&2
  done
  die "${#gone[@]} old variable(s) above no longer exist; unset them (README: Migrating from the serve scripts)"
fi

map_plain MODEL model.path
if [[ -n "${MODEL_REVISION+set}" ]]; then
  # The old scripts dropped --revision when MODEL_REVISION was empty or MODEL was a local path.
  if [[ -z "${MODEL_REVISION}" ]]; then set_opt model.revision null; else set_opt model.revision "${MODEL_REVISION}"; fi
fi
map_plain SERVED_MODEL_NAME model.served_name
map_plain QUANTIZATION model.quantization
map_plain LOAD_FORMAT model.load_format
map_plain GLM52_INDEX_TOPK_PATTERN model.geometry.index_topk_pattern
map_plain PORT server.port
map_plain MOE_BACKEND server.moe_backend
map_plain DCP_BACKEND server.dcp_comm_backend
map_plain TP parallel.tp
map_plain DCP parallel.dcp
if [[ -n "${GPUS:-}" ]]; then
  # The old default listed all eight GPUs for a TP4 deployment; glmlaunch derives the list from TP
  # unless it is given.
  set_opt parallel.gpus "[${GPUS}]"
fi
map_plain MTP speculative.num_speculative_tokens
map_plain MAX_NUM_SEQS scheduler.max_num_seqs
map_plain MAX_BATCHED_TOKENS scheduler.max_num_batched_tokens
map_plain MAX_MODEL_LEN scheduler.max_model_len
map_plain GPU_MEMORY_UTILIZATION memory.gpu_memory_utilization
map_plain KV_CACHE_DTYPE memory.kv_cache_dtype
map_plain F8_DMA comm.dma_wire_mode
case "${B12X_PCIE_DMA:-}" in
  "" | 1) ;;
  0) set_opt comm.dma_min_bytes off ;;
  *) die "B12X_PCIE_DMA must be 0 or 1 (got '${B12X_PCIE_DMA}')" ;;
esac
case "${PCIE_DMA_MIN_BYTES:-auto}" in
  auto) ;;
  0 | off) set_opt comm.dma_min_bytes off ;;
  *) set_opt comm.dma_min_bytes "${PCIE_DMA_MIN_BYTES}" ;;
esac
map_plain DCP_A2A_MAX_TOKENS comm.dcp_a2a_max_tokens
if [[ -n "${GRAPH:-}" && -n "${CUDAGRAPH_CAPTURE_SIZES:-}" ]]; then
  die "GRAPH and CUDAGRAPH_CAPTURE_SIZES both set; give one"
fi
if [[ -n "${GRAPH:-}" ]]; then
  # GRAPH was the largest capture size; sizes are the multiples of MTP+1 up to it.
  set_opt cudagraph.capture_sizes null
  set_opt cudagraph.capture_rule "{max: ${GRAPH}}"
fi
if [[ -n "${CUDAGRAPH_CAPTURE_SIZES:-}" ]]; then
  set_opt cudagraph.capture_rule null
  set_opt cudagraph.capture_sizes "[${CUDAGRAPH_CAPTURE_SIZES}]"
fi
map_bool_auto DCP_QUERY_SPLIT dcp_policy.query_split
map_int_auto DCP_QUERY_SPLIT_MIN_CONTEXT_TOKENS dcp_policy.query_split_min_context_tokens
map_bool_auto DCP_CKV_GATHER dcp_policy.ckv_gather
map_int_auto DCP_CKV_GATHER_MAX_TOKENS dcp_policy.ckv_gather_max_tokens
map_bool_auto DCP_TOPK_OWNER_MERGE dcp_policy.topk_owner_merge
map_int_auto DCP_INDEXER_SHARDS dcp_policy.indexer_shards
map_int_auto DCP_CKV_PREFETCH_DEPTH dcp_policy.ckv_prefetch_depth
map_int_auto DCP_CKV_PREFETCH_WORKSPACE_MIB dcp_policy.ckv_prefetch_workspace_mib

opts=()
if [[ -z "${GLMLAUNCH_PROFILE:-}" ]]; then
  opts+=(--profile r12-exl3)
fi
case "${DRY_RUN:-0}" in
  0 | "") ;;
  1) opts+=(--dry-run) ;;
  *) die "DRY_RUN must be 0 or 1 (got '${DRY_RUN}')" ;;
esac

# Arguments given to this script are extra vllm arguments, as with the old scripts' "$@".
if (($#)) && [[ "$1" == "--" ]]; then
  shift
fi
exec glmlaunch serve "${opts[@]}" "${args[@]}" -- "$@"
