#!/usr/bin/env bash
# Drop-in replacement for the old launcher chain (serve-gilded-gnosis.sh -> serve-glm52-v19.sh ->
# serve-glm52-v16.sh): reads the variables those scripts read, turns each one that is set into a
# `glmlaunch serve --set key=value`, and execs `glmlaunch serve`, which execs vLLM (signals reach vLLM as
# before). README.md "Migrating from the serve scripts" has the full mapping table. Usage, from the
# repository root (tests/test_examples.py runs each line; `# needs: gpu`: exit 8 where there is none):
#
#   MODEL_FAMILY=glm52 TP=4 DCP=2 MTP=5 scripts/serve-glm52.sh                    # needs: gpu
#   MODEL_FAMILY=glm52 TP=4 DCP=2 MTP=5 scripts/serve-glm52.sh -- --enable-lora   # needs: gpu
#   export GLMLAUNCH_INVENTORY=tests/fixtures/inventories/rtxpro6000x4.json GLMLAUNCH_SKIP_PREFLIGHT=1
#   GLMLAUNCH_PROFILE=gate DRY_RUN=1 scripts/serve-glm52.sh
#
# Arguments are extra `vllm serve` arguments, as they were for the old scripts ("$@"). The last two
# lines print what would run on any machine where vllm is installed (without it: exit 6, as the launch):
# checked against a saved inventory (`glmlaunch hw --save FILE` on the rig) instead of the GPUs, and
# without the preflight, which needs them.
#
# The profile is glmlaunch's choice (GLMLAUNCH_PROFILE, else glmlaunch's default, turnkey), except that
# MODEL_FAMILY=glm52-exl3 (or exl3) without GLMLAUNCH_PROFILE serves what the old chain served for it, its
# r12 EXL3 preset: glmlaunch's r12-exl3 profile. The script has no defaults of its own. Only variables that
# are set, non-empty and not "auto" become overrides (and MODEL_REVISION set empty: no revision, as
# before). The values are checked by glmlaunch (one line naming the key; the line this script prints first
# maps each key back to the variable that set it). Every value the old chain itself exported is accepted:
# the old chain's environment, run through this script, gives the old chain's argv
# (tests/test_examples.py). Variables whose job glmlaunch does differently (calibration, the old quant
# overlays) are accepted at their neutral values (the old default, off, empty) and named on stderr.
# Refused with one line, exit 2:
# - two spellings of one setting with different values: an old variable and the VLLM_* (or
#  CUDA_VISIBLE_DEVICES) name serve-glm52-v19.sh read in its place, or glmlaunch's own spelling of the
#  key (GLMLAUNCH_<SECTION>__<FIELD>, a GLMLAUNCH_SET entry): the old chain let one silently win;
# - those variables at any other value (with the replacement), and other model families.
set -euo pipefail

die() {
  printf 'serve-glm52.sh: error: %s\n' "$*" >&2
  exit 2
}

sets=()     # --set arguments for glmlaunch, in table order
mapped=()   # "OLD=value -> key=value", printed once so glmlaunch's messages (in keys) lead back here

trim() {
  local s=$1
  s=${s#"${s%%[![:space:]]*}"}
  printf '%s' "${s%"${s##*[![:space:]]}"}"
}

# The setting key a GLMLAUNCH_<SECTION>__<FIELD> variable name spells (resolve.py's rule).
env_name_key() {
  local body=${1#GLMLAUNCH_}
  body=${body,,}
  printf '%s' "${body//__/.}"
}

# Dies when glmlaunch's own spelling of KEY (a variable or a GLMLAUNCH_SET entry) or of one of the
# RELATED keys gives a value other than OLD's: the --set made here would replace it unseen. A key inside
# KEY, or a related key, always conflicts: its value cannot be compared with OLD's.
refuse_other_spellings() {
  local old=$1 raw=$2 value=$3 key=$4
  shift 4
  local -a keys=("${key}" "$@")
  local name k item given related
  for name in ${!GLMLAUNCH_@}; do
    k=$(env_name_key "${name}")
    for related in "${keys[@]}"; do
      if [[ "${k}" == "${related}" || "${k}" == "${related}".* ]]; then
        given=$(trim "${!name}")
        if [[ "${k}" == "${key}" && ("${given}" == "${raw}" || "${given}" == "${value}") ]]; then
          continue
        fi
        die "${old}=${raw} and ${name}=${!name} both set ${related}; unset one of them"
      fi
    done
  done
  local text=${GLMLAUNCH_SET:-}
  local -a items=()
  IFS=';' read -r -a items <<<"${text//$'\n'/;}"
  for item in ${items[@]+"${items[@]}"}; do
    k=$(trim "${item%%=*}")
    for related in "${keys[@]}"; do
      if [[ "${k}" == "${related}" || "${k}" == "${related}".* ]]; then
        given=$(trim "${item#*=}")
        if [[ "${k}" == "${key}" && ("${given}" == "${raw}" || "${given}" == "${value}") ]]; then
          continue
        fi
        die "${old}=${raw} and GLMLAUNCH_SET's ${k}=${given} both set ${related}; remove one of them"
      fi
    done
  done
}

# add OLD RAW KEY VALUE [RELATED_KEY...]: OLD=RAW becomes --set KEY=VALUE.
add() {
  local old=$1 raw=$2 key=$3 value=$4
  shift 4
  refuse_other_spellings "${old}" "${raw}" "${value}" "${key}" "$@"
  sets+=(--set "${key}=${value}")
  mapped+=("${old}=${raw} -> ${key}=${value}")
}

# read_old VAR KEY [ALIAS]: sets $from and $raw to the variable that gives KEY (empty when neither is
# set). serve-glm52-v19.sh read ALIAS when VAR was unset and silently preferred VAR when both were.
read_old() {
  local var=$1 key=$2 alias=${3:-}
  from='' raw=''
  if [[ -n "${!var:-}" ]]; then
    from=${var} raw=${!var}
  fi
  if [[ -n "${alias}" && -n "${!alias:-}" ]]; then
    if [[ -n "${from}" && "${raw}" != "${!alias}" ]]; then
      die "${var}=${raw} and ${alias}=${!alias} both set ${key}; unset one of them"
    fi
    if [[ -z "${from}" ]]; then
      from=${alias} raw=${!alias}
    fi
  fi
}

# map VAR KEY [ALIAS]: the value goes to glmlaunch as it is; glmlaunch validates it.
map() {
  read_old "$1" "$2" "${3:-}"
  if [[ -n "${from}" ]]; then add "${from}" "${raw}" "$2" "${raw}"; fi
}

# auto|0|1 (the v19 DCP policy knobs): auto leaves the library's choice, 0/1 become false/true.
map_bool_auto() {
  read_old "$1" "$2" "${3:-}"
  case "${raw}" in
    "" | auto) ;;
    0) add "${from}" "${raw}" "$2" false ;;
    1) add "${from}" "${raw}" "$2" true ;;
    *) die "${from} must be auto, 0 or 1 (got '${raw}')" ;;
  esac
}

# auto|N: auto leaves the library's choice.
map_int_auto() {
  read_old "$1" "$2" "${3:-}"
  if [[ -n "${raw}" && "${raw}" != auto ]]; then add "${from}" "${raw}" "$2" "${raw}"; fi
}

# The profile: glmlaunch's choice (GLMLAUNCH_PROFILE, else its default), except for the family the old
# chain served with a preset of its own: glm52-exl3 exported the r12 EXL3 preset (serve-gilded-gnosis.sh),
# which is glmlaunch's r12-exl3 profile.
profile=()
family=$(trim "${MODEL_FAMILY:-glm52}")
case "${family}" in
  glm52 | glm5.2 | glm) ;;
  glm52-exl3 | exl3)
    if [[ -z "${GLMLAUNCH_PROFILE:-}" ]]; then
      profile=(-p r12-exl3)
      mapped+=("MODEL_FAMILY=${family} -> -p r12-exl3")
    fi
    ;;
  *) die "MODEL_FAMILY=${MODEL_FAMILY} is not served by glmlaunch (GLM-5.2 only: glm52, glm5.2, glm, glm52-exl3, exl3)" ;;
esac

# Old variables whose job glmlaunch does differently. A value that asks for nothing glmlaunch does not do
# anyway (the old chain's own default, "off", empty: what the old chain itself exported) is accepted and
# named once on stderr; any other value is refused, all of them at once, with what to do instead.
gone=()
accepted=()
# retired VAR WHY [ACCEPTED...]: '*' accepts every value (the variable configured only what no longer runs).
retired() {
  local var=$1 why=$2 value ok
  shift 2
  [[ -n "${!var+set}" ]] || return 0
  value=$(trim "${!var}")
  for ok in "$@"; do
    if [[ "${ok}" == '*' || "${value}" == "${ok}" ]]; then
      accepted+=("${var}=${value}")
      return 0
    fi
  done
  gone+=("${var}=${value}: ${why}")
}
calibration="calibration is no longer a boot-time side effect: glmlaunch runs its preflight (--skip-preflight / GLMLAUNCH_SKIP_PREFLIGHT=1 to skip it) and \`glmlaunch calibrate\` learns from boot logs"
retired PCIE_CALIBRATION "${calibration}" "" auto off 0
retired PCIE_CALIBRATION_ONLY "use \`glmlaunch preflight\` (or \`glmlaunch calibrate\`) on its own" "" 0
# these configured only the boot-time calibrator, which no longer runs: any value is harmless
retired PCIE_CALIBRATION_TIMEOUT "" '*'
retired PCIE_CALIBRATION_CACHE_DIR "" '*'
retired PCIE_CALIBRATOR "" '*'
retired DCP_CKV_PREFETCH_TOPOLOGY "the check stage reads the NVML topology and refuses CKV prefetch over SYS; set DCP_CKV_PREFETCH_DEPTH explicitly" "" auto
quant="the old chain's overlays (full-linear mxfp8, nf3-mxfp8, fp8, custom) are not the appliance's; set model.online_quant (none, mxfp8, exl3-b6), or pass --quantization-config in the profile's vllm_args"
# none (the r12 preset's export; v16 also took 0 and off) and the online K6 of the R7 chains (exl3-b6, which
# the Infernal Invocation launchers spell trellis-mcg-b6) are model.online_quant, below
case "$(trim "${ONLINE_QUANT-}")" in
  "" | none | 0 | off | exl3-b6 | trellis-mcg-b6) ;;
  *) gone+=("ONLINE_QUANT=$(trim "${ONLINE_QUANT}"): ${quant}") ;;
esac
retired ONLINE_MXFP8 "see ONLINE_QUANT" "" 0
retired ONLINE_FP8 "see ONLINE_QUANT" "" 0
retired ONLINE_FP8_MXFP4 "see ONLINE_QUANT" "" 0
retired QUANTIZATION_CONFIG_JSON "see ONLINE_QUANT" ""
retired LINEAR_BACKEND "not modelled; pass --linear-backend after -- (it is not a managed flag)" "" auto
if ((${#gone[@]})); then
  for line in "${gone[@]}"; do
    printf 'serve-glm52.sh: error: %s\n' "${line}" >&2
  done
  die "${#gone[@]} old variable(s) above ask for what glmlaunch no longer does; unset them (README: Migrating from the serve scripts)"
fi

map MODEL model.path
if [[ -n "${MODEL_REVISION+set}" ]]; then
  # The old scripts dropped --revision when MODEL_REVISION was empty.
  add MODEL_REVISION "${MODEL_REVISION}" model.revision "${MODEL_REVISION:-null}"
fi
map SERVED_MODEL_NAME model.served_name
map QUANTIZATION model.quantization
map LOAD_FORMAT model.load_format
map GLM52_INDEX_TOPK_PATTERN model.geometry.index_topk_pattern
map PORT server.port
map MOE_BACKEND server.moe_backend
map DCP_BACKEND server.dcp_comm_backend
map TP parallel.tp
map DCP parallel.dcp
# v19 took the GPU list from CUDA_VISIBLE_DEVICES when GPUS was empty. Unset, glmlaunch uses the first
# TP GPUs (the old default listed eight GPUs for a TP4 deployment).
map GPUS parallel.gpus CUDA_VISIBLE_DEVICES
map MTP speculative.num_speculative_tokens
map MAX_NUM_SEQS scheduler.max_num_seqs
map MAX_BATCHED_TOKENS scheduler.max_num_batched_tokens
map MAX_MODEL_LEN scheduler.max_model_len
map GPU_MEMORY_UTILIZATION memory.gpu_memory_utilization
map KV_CACHE_DTYPE memory.kv_cache_dtype
map F8_DMA comm.dma_wire_mode
read_old PCIE_DMA_MIN_BYTES comm.dma_min_bytes VLLM_PCIE_DMA_MIN_BYTES
case "${B12X_PCIE_DMA:-}" in
  "" | 1) ;;
  0)
    case "${raw}" in
      "" | auto | 0 | off) ;;
      *) die "B12X_PCIE_DMA=0 (no DMA) and ${from}=${raw} (a crossover) both set comm.dma_min_bytes; unset one of them" ;;
    esac
    add B12X_PCIE_DMA 0 comm.dma_min_bytes off
    raw=''
    ;;
  *) die "B12X_PCIE_DMA must be 0 or 1 (got '${B12X_PCIE_DMA}')" ;;
esac
case "${raw}" in
  "" | auto) ;;
  0 | off) add "${from}" "${raw}" comm.dma_min_bytes off ;;
  *) add "${from}" "${raw}" comm.dma_min_bytes "${raw}" ;;
esac
map DCP_A2A_MAX_TOKENS comm.dcp_a2a_max_tokens
if [[ -n "${GRAPH:-}" && -n "${CUDAGRAPH_CAPTURE_SIZES:-}" ]]; then
  die "GRAPH=${GRAPH} and CUDAGRAPH_CAPTURE_SIZES=${CUDAGRAPH_CAPTURE_SIZES} both set the capture sizes; unset one of them"
fi
if [[ -n "${GRAPH:-}" ]]; then
  # GRAPH was the largest capture size; the sizes are the multiples of MTP+1 up to it (step null), and
  # the rule replaces a capture_sizes list the profile gives.
  add GRAPH "${GRAPH}" cudagraph.capture_rule "{step: null, max: ${GRAPH}}" cudagraph.capture_sizes
  # the chain never passed --max-cudagraph-capture-size: vLLM takes the largest captured size
  sets+=(--set "cudagraph.max_capture_size=null")
fi
if [[ -n "${CUDAGRAPH_CAPTURE_SIZES:-}" ]]; then
  # glmlaunch reads the old comma list itself, and a list replaces the profile's capture_rule.
  add CUDAGRAPH_CAPTURE_SIZES "${CUDAGRAPH_CAPTURE_SIZES}" cudagraph.capture_sizes \
    "${CUDAGRAPH_CAPTURE_SIZES}" cudagraph.capture_rule
fi
map NUM_GPU_BLOCKS_OVERRIDE memory.num_gpu_blocks_override
map MTP_MOE_BACKEND speculative.moe_backend
map MTP_DRAFT_SAMPLE_METHOD speculative.draft_sample_method
map_bool_auto ASYNC_SCHEDULING scheduler.async_scheduling
map DCP_KV_CACHE_INTERLEAVE_SIZE server.dcp_kv_cache_interleave_size
case "$(trim "${ONLINE_QUANT:-}")" in
  "") ;;
  none | 0 | off) add ONLINE_QUANT "${ONLINE_QUANT}" model.online_quant none ;;
  *) add ONLINE_QUANT "${ONLINE_QUANT}" model.online_quant "$(trim "${ONLINE_QUANT}")" ;;
esac
# v16's MOE_MODE table: the two b12x MoE activation switches it exported (the profile's env: names)
case "$(trim "${MOE_MODE:-}")" in
  "") ;;
  a4 | native | default) add MOE_MODE "${MOE_MODE}" env.B12X_MOE_FORCE_A16 0 && sets+=(--set "env.B12X_MOE_FORCE_A8=0") ;;
  a16 | force-a16) add MOE_MODE "${MOE_MODE}" env.B12X_MOE_FORCE_A16 1 && sets+=(--set "env.B12X_MOE_FORCE_A8=0") ;;
  force-a8-experimental | a8-experimental | a8)
    add MOE_MODE "${MOE_MODE}" env.B12X_MOE_FORCE_A16 0 && sets+=(--set "env.B12X_MOE_FORCE_A8=1")
    ;;
  *) die "MOE_MODE must be a4, a16 or force-a8-experimental (got '${MOE_MODE}')" ;;
esac
# v16 exported these two under their VLLM_* names as they were
case "$(trim "${NF3_GRID188:-}")" in
  "") ;;
  0 | 1) add NF3_GRID188 "${NF3_GRID188}" env.VLLM_NF3_GRID188_DECODE "$(trim "${NF3_GRID188}")" ;;
  *) die "NF3_GRID188 must be 0 or 1 (got '${NF3_GRID188}')" ;;
esac
case "$(trim "${DCP_A2A_LARGE_BACKEND:-}")" in
  "") ;;
  ag_rs | a2a)
    add DCP_A2A_LARGE_BACKEND "${DCP_A2A_LARGE_BACKEND}" env.VLLM_DCP_A2A_LARGE_BACKEND \
      "$(trim "${DCP_A2A_LARGE_BACKEND}")"
    ;;
  *) die "DCP_A2A_LARGE_BACKEND must be ag_rs or a2a (got '${DCP_A2A_LARGE_BACKEND}')" ;;
esac
# v16 exported DCP_PREFILL_WORKSPACE=0/1 as both VLLM_DCP_PROJECT_BEFORE_MERGE and
# VLLM_B12X_MLA_DCP_GATHER_IN_WORKSPACE (auto: its TP:DCP table, which the profile already holds)
map_bool_auto DCP_PREFILL_WORKSPACE dcp_policy.project_before_merge
case "${DCP_PREFILL_WORKSPACE:-}" in
  0) sets+=(--set "dcp_policy.gather_in_workspace=false") ;;
  1) sets+=(--set "dcp_policy.gather_in_workspace=true") ;;
esac
map_bool_auto DCP_QUERY_SPLIT dcp_policy.query_split VLLM_DCP_QUERY_SPLIT
map_int_auto DCP_QUERY_SPLIT_MIN_CONTEXT_TOKENS dcp_policy.query_split_min_context_tokens \
  VLLM_DCP_QUERY_SPLIT_MIN_CONTEXT_TOKENS
map_bool_auto DCP_CKV_GATHER dcp_policy.ckv_gather VLLM_B12X_MLA_CKV_GATHER
map_int_auto DCP_CKV_GATHER_MAX_TOKENS dcp_policy.ckv_gather_max_tokens VLLM_B12X_MLA_CKV_GATHER_MAX_TOKENS
map_bool_auto DCP_TOPK_OWNER_MERGE dcp_policy.topk_owner_merge VLLM_DCP_TOPK_OWNER_MERGE
map_int_auto DCP_INDEXER_SHARDS dcp_policy.indexer_shards VLLM_DCP_INDEXER_SHARDS
map_int_auto DCP_CKV_PREFETCH_DEPTH dcp_policy.ckv_prefetch_depth VLLM_B12X_MLA_CKV_PREFETCH_DEPTH
map_int_auto DCP_CKV_PREFETCH_WORKSPACE_MIB dcp_policy.ckv_prefetch_workspace_mib \
  VLLM_B12X_MLA_CKV_PREFETCH_WORKSPACE_MIB

opts=()
case "${DRY_RUN:-0}" in
  0 | "") ;;
  1) opts+=(--dry-run) ;;
  *) die "DRY_RUN must be 0 or 1 (got '${DRY_RUN}')" ;;
esac

if ((${#mapped[@]})); then
  joined=$(printf '%s, ' "${mapped[@]}")
  printf 'serve-glm52.sh: %s\n' "${joined%, }" >&2
fi
if ((${#accepted[@]})); then
  joined=$(printf '%s, ' "${accepted[@]}")
  printf 'serve-glm52.sh: %s: nothing to do (what glmlaunch does anyway)\n' "${joined%, }" >&2
fi

# Arguments given to this script are extra vllm arguments, as with the old scripts' "$@".
if (($#)) && [[ "$1" == "--" ]]; then
  shift
fi
exec glmlaunch serve ${profile[@]+"${profile[@]}"} ${opts[@]+"${opts[@]}"} ${sets[@]+"${sets[@]}"} -- "$@"
