"""ctypes declarations of include/spindle.h (structs field for field, in the
header's order; tests/py/test_python.py checks every size and offset
against the C compiler)."""
import ctypes
import ctypes.util
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char, c_char_p, c_double, c_float, c_int,
                    c_int32, c_int64, c_size_t, c_uint32, c_uint64, c_void_p)

MAX_LOGPROBS = 20
FINISH_NAMES = {0: None, 1: "stop", 2: "length", 3: "cancelled", 4: "error"}


class ModelParams(Structure):
    _fields_ = [("path", c_char_p), ("n_threads", c_int), ("use_mmap", c_bool), ("use_mlock", c_bool),
                ("private_copy", c_bool), ("vocab_only", c_bool), ("isa", c_char_p), ("progress", c_void_p), ("progress_user", c_void_p)]


class ModelInfo(Structure):
    _fields_ = [("path", c_char_p), ("architecture", c_char_p), ("tokenizer", c_char_p),
                ("tokenizer_pre", c_char_p), ("isa", c_char_p), ("gguf_version", c_uint32),
                ("n_tensors", c_uint64), ("n_meta", c_uint64), ("file_bytes", c_uint64),
                ("weights_bytes", c_uint64), ("n_vocab", c_uint32), ("n_ctx_train", c_uint32),
                ("n_embd", c_uint32), ("n_layer", c_uint32), ("n_ff", c_uint32), ("n_head", c_uint32),
                ("n_head_kv", c_uint32), ("head_dim", c_uint32), ("n_rot", c_uint32), ("n_swa", c_uint32),
                ("n_swa_layers", c_uint32), ("rope_base", c_float), ("rope_freq_scale", c_float),
                ("rope_base_swa", c_float), ("norm_eps", c_float), ("bos", c_int32), ("eos", c_int32),
                ("has_chat_template", c_bool), ("tied_output", c_bool), ("vocab_only", c_bool),
                ("n_packed", c_uint32), ("packed_bytes", c_uint64), ("features", c_char_p),
                ("private_copy_bytes", c_uint64), ("swa_chunked", c_bool)]


class EngineParams(Structure):
    _fields_ = [("n_threads", c_int), ("n_ctx", c_int), ("n_parallel", c_int), ("kv_mem_mib", c_size_t),
                ("n_batch", c_int), ("swa_full", c_bool), ("n_outputs", c_int), ("cache_type_k", c_int),
                ("cache_type_v", c_int), ("spec", c_int), ("spec_k", c_int), ("spec_fixed", c_bool),
                ("draft_model", c_void_p), ("spec_layers", c_int), ("threads", c_void_p)]


class LogitBias(Structure):
    _fields_ = [("id", c_int32), ("bias", c_float)]


class SamplerParams(Structure):
    _fields_ = [("temperature", c_float), ("top_k", c_int32), ("top_p", c_float), ("min_p", c_float),
                ("typical_p", c_float), ("repeat_penalty", c_float), ("repeat_last_n", c_int32),
                ("presence_penalty", c_float), ("frequency_penalty", c_float), ("seed", c_uint64),
                ("logit_bias", POINTER(LogitBias)), ("n_logit_bias", c_size_t), ("n_logprobs", c_int32)]


class GenParams(Structure):
    _fields_ = [("sampling", SamplerParams), ("max_tokens", c_int32), ("stop", POINTER(c_char_p)),
                ("n_stop", c_size_t), ("n", c_int), ("beams", c_int), ("length_penalty", c_float),
                ("ignore_eos", c_bool), ("logprobs", c_int), ("explain", c_bool), ("grammar", c_void_p),
                ("validate", c_void_p), ("validate_ctx", c_void_p), ("max_retries", c_int),
                ("stages", c_void_p), ("n_stages", c_size_t)]


class EmbedParams(Structure):
    _fields_ = [("pooling", c_int), ("no_normalize", c_bool)]


class TopLogprob(Structure):
    _fields_ = [("id", c_int32), ("logprob", c_float)]


class TokenLogprobs(Structure):
    _fields_ = [("logprob", c_float), ("n_top", c_int), ("top", TopLogprob * MAX_LOGPROBS)]


class TokenEvent(Structure):
    _fields_ = [("choice", c_int), ("id", c_int32), ("text", c_void_p), ("len", c_size_t),
                ("lp", POINTER(TokenLogprobs)), ("explain", c_void_p), ("finish", c_int), ("n_prompt", c_uint32),
                ("n_cached", c_uint32), ("n_generated", c_uint32), ("logprob_sum", c_double), ("attempt", c_int),
                ("retry", c_bool), ("valid", c_bool), ("error", c_char_p)]


class ChatMsg(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p), ("tool_calls", c_char_p), ("tool_call_id", c_char_p),
                ("name", c_char_p), ("reasoning_content", c_char_p)]


class EngineStats(Structure):
    _fields_ = [("kv_blocks_total", c_uint32), ("kv_blocks_used", c_uint32), ("kv_blocks_cached", c_uint32),
                ("kv_block_tokens", c_uint32), ("kv_bytes", c_uint64), ("prefix_hits", c_uint64),
                ("prefix_tokens_reused", c_uint64), ("n_running", c_uint32), ("mem_weights", c_uint64),
                ("mem_kv", c_uint64), ("mem_kv_rings", c_uint64), ("mem_scratch", c_uint64),
                ("mem_resident", c_uint64), ("spec_drafted", c_uint64), ("spec_accepted", c_uint64),
                ("state_bytes_per_seq", c_uint64), ("mem_state", c_uint64), ("state_slots_used", c_uint32),
                ("state_snapshots", c_uint32), ("state_snapshot_bytes", c_uint64),
                ("mem_state_snapshots", c_uint64)]


class TensorInfo(Structure):
    _fields_ = [("name", c_char * 128), ("type", c_uint32), ("type_name", c_char_p), ("n_dims", c_uint32),
                ("ne", c_int64 * 4), ("n_bytes", c_uint64)]


# C struct name -> ctypes class (for the layout test).
STRUCTS = {
    "sp_model_params": ModelParams, "sp_model_info": ModelInfo, "sp_engine_params": EngineParams,
    "sp_logit_bias": LogitBias, "sp_sampler_params": SamplerParams, "sp_gen_params": GenParams,
    "sp_token_logprobs": TokenLogprobs, "sp_token_event": TokenEvent, "sp_chat_msg": ChatMsg,
    "sp_engine_stats": EngineStats, "sp_tensor_info": TensorInfo, "sp_embed_params": EmbedParams,
}

EVENT_FN = CFUNCTYPE(None, c_void_p, POINTER(TokenEvent))
LOGITS_FN = CFUNCTYPE(None, c_void_p, c_size_t, POINTER(c_float))

_P = c_void_p  # opaque handles
_SIGNATURES = {
    "sp_version": (c_char_p, []),
    "sp_error_message": (c_char_p, []),
    "sp_status_name": (c_char_p, [c_int]),
    "sp_free": (None, [c_void_p]),
    "sp_model_params_default": (None, [POINTER(ModelParams)]),
    "sp_model_load": (c_int, [POINTER(ModelParams), POINTER(_P)]),
    "sp_model_free": (None, [_P]),
    "sp_model_info_get": (None, [_P, POINTER(ModelInfo)]),
    "sp_model_tensor_get": (c_int, [_P, c_uint64, POINTER(TensorInfo)]),
    "sp_model_meta_key": (c_int, [_P, c_uint64, c_char_p, c_size_t, POINTER(c_size_t)]),
    "sp_model_meta_value": (c_int, [_P, c_char_p, c_char_p, c_size_t, POINTER(c_size_t)]),
    "sp_model_n_vocab": (c_uint32, [_P]),
    "sp_model_token_is_eog": (c_bool, [_P, c_int32]),
    "sp_model_tokenize": (c_int, [_P, c_char_p, c_size_t, c_bool, c_bool, POINTER(c_int32), c_size_t,
                                  POINTER(c_size_t)]),
    "sp_model_token_to_piece": (c_int, [_P, c_int32, c_bool, c_char_p, c_size_t, POINTER(c_size_t)]),
    "sp_model_detokenize": (c_int, [_P, POINTER(c_int32), c_size_t, c_bool, c_char_p, c_size_t,
                                    POINTER(c_size_t)]),
    "sp_model_chat_template": (c_char_p, [_P]),
    "sp_model_chat_apply": (c_int, [_P, POINTER(ChatMsg), c_size_t, c_bool, POINTER(c_void_p)]),
    "sp_model_chat_tokenize": (c_int, [_P, POINTER(ChatMsg), c_size_t, POINTER(POINTER(c_int32)),
                                       POINTER(c_size_t)]),
    "sp_engine_params_default": (None, [POINTER(EngineParams)]),
    "sp_engine_create": (c_int, [_P, POINTER(EngineParams), POINTER(_P)]),
    "sp_engine_free": (None, [_P]),
    "sp_engine_n_ctx": (c_int, [_P]),
    "sp_engine_stats_get": (None, [_P, POINTER(EngineStats)]),
    "sp_engine_step": (c_int, [_P]),
    "sp_engine_logits": (c_int, [_P, POINTER(c_int32), c_size_t, c_size_t, LOGITS_FN, c_void_p]),
    "sp_cache_type_parse": (c_int, [c_char_p, POINTER(c_int)]),
    "sp_spec_kind_parse": (c_int, [c_char_p, POINTER(c_int)]),
    "sp_pooling_name": (c_char_p, [c_int]),
    "sp_pooling_parse": (c_int, [c_char_p, POINTER(c_int)]),
    "sp_model_pooling": (c_int, [_P]),
    "sp_engine_embed": (c_int, [_P, POINTER(POINTER(c_int32)), POINTER(c_size_t), c_size_t, POINTER(EmbedParams),
                                POINTER(c_float)]),
    "sp_engine_n_embd": (c_int, [_P]),
    "sp_engine_embed_max_tokens": (c_int, [_P]),
    "sp_gen_params_default": (None, [POINTER(GenParams)]),
    "sp_grammar_create": (c_int, [_P, c_int, c_char_p, c_size_t, POINTER(_P)]),
    "sp_grammar_free": (None, [_P]),
    "sp_grammar_check_text": (c_int, [_P, c_char_p, c_size_t, c_char_p, c_size_t]),
    "sp_grammar_json_object_gbnf": (c_char_p, []),
    "sp_request_submit": (c_int, [_P, POINTER(c_int32), c_size_t, POINTER(GenParams), EVENT_FN, c_void_p,
                                  POINTER(_P)]),
    "sp_request_poll": (c_bool, [_P, POINTER(TokenEvent)]),
    "sp_request_done": (c_bool, [_P]),
    "sp_request_free": (None, [_P]),
}


def _candidates():
    env = os.environ.get("SPINDLE_LIB")
    if env:
        return [env]
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libspindle.so")
    return [bundled, ctypes.util.find_library("spindle") or "libspindle.so.0"]


def load():
    """The loaded library with every function's signature set."""
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            errors.append("%s: no such file" % path)
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
            continue
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        return lib
    raise ImportError("spindle: cannot load libspindle.so (%s); set SPINDLE_LIB to its path"
                      % "; ".join(errors))
