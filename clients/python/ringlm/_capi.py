"""ctypes declarations of libringlm's public API (clients/ringlm.h), and finding the library.

The structs here mirror ringlm.h field for field; ringlm.h is their owner. ctypes releases the
GIL around every foreign call, so a thread blocked in ringlm_wait does not stop Python.
"""
import ctypes
import ctypes.util
import os

MAX_STOP = 8
MAX_TOP_LOGPROBS = 20
EV_TOKEN, EV_DONE, EV_ERROR, EV_PROMPT = 1, 2, 3, 4
TOKENIZE_BOS, TOKENIZE_SPECIAL = 1, 2
FINISH = {1: "length", 2: "stop", 3: "eos", 4: "context", 5: "cancel"}


class Event(ctypes.Structure):
    _fields_ = [("tag", ctypes.c_uint64), ("id", ctypes.c_uint32), ("token", ctypes.c_uint32),
                ("type", ctypes.c_uint16), ("code", ctypes.c_int16), ("index", ctypes.c_uint32)]


class Request(ctypes.Structure):
    _fields_ = [("prompt", ctypes.POINTER(ctypes.c_uint32)), ("n_prompt", ctypes.c_uint32),
                ("max_new", ctypes.c_uint32), ("temperature", ctypes.c_float),
                ("top_k", ctypes.c_uint32), ("top_p", ctypes.c_float), ("seed", ctypes.c_uint64),
                ("stop", ctypes.POINTER(ctypes.c_uint32)), ("n_stop", ctypes.c_uint32),
                ("priority", ctypes.c_int32), ("deadline_ns", ctypes.c_uint64), ("tag", ctypes.c_uint64),
                ("logprobs", ctypes.c_uint8), ("top_logprobs", ctypes.c_uint8), ("prompt_logprobs", ctypes.c_uint8),
                ("no_spec", ctypes.c_uint8), ("deterministic", ctypes.c_uint8), ("constraint", ctypes.c_void_p)]


class Logprobs(ctypes.Structure):
    _fields_ = [("logprob", ctypes.c_float), ("n_top", ctypes.c_uint32),
                ("top_id", ctypes.c_uint32 * MAX_TOP_LOGPROBS), ("top_logprob", ctypes.c_float * MAX_TOP_LOGPROBS)]


class Params(ctypes.Structure):
    _fields_ = [("socket", ctypes.c_char_p), ("model", ctypes.c_char_p), ("tokenizer", ctypes.c_char_p),
                ("backend", ctypes.c_char_p), ("runtime_args", ctypes.c_char_p), ("spin_us", ctypes.c_int),
                ("force_fallback", ctypes.c_int), ("observe", ctypes.c_int)]


class Info(ctypes.Structure):
    _fields_ = [("model", ctypes.c_char * 64), ("backend", ctypes.c_char * 16),
                ("vocab_size", ctypes.c_uint32), ("max_ctx", ctypes.c_uint32), ("bos_id", ctypes.c_uint32),
                ("eos_id", ctypes.c_uint32), ("max_prompt", ctypes.c_uint32), ("max_new", ctypes.c_uint32),
                ("max_inflight", ctypes.c_uint32), ("futex_wake", ctypes.c_int),
                ("chat_template", ctypes.c_char * 16), ("deterministic", ctypes.c_int),
                ("block_size", ctypes.c_uint32)]


class ChatMsg(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


class TextStream(ctypes.Structure):
    _fields_ = [("prev", ctypes.c_uint32), ("n_held", ctypes.c_uint32), ("held", ctypes.c_char * 4)]


def _candidates():
    env = os.environ.get("RINGLM_LIB")
    if env:
        return [env]               # named explicitly: used alone, so a typo is an error
    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(here, "libringlm.so"),
           os.path.join(here, "..", "..", "..", "build", "libringlm.so")]   # the source tree
    found = ctypes.util.find_library("ringlm")
    if found:
        out.append(found)
    out.append("libringlm.so.0")
    return out


def load():
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
            continue
        _declare(lib)
        return lib
    raise OSError("libringlm.so not found (tried: %s); build it with `make` and set RINGLM_LIB=/path/to/"
                  "libringlm.so, or `make install`" % "; ".join(errors))


def _declare(lib):
    P = ctypes.c_void_p
    sig = {
        "ringlm_default_params": (Params, []),
        "ringlm_default_request": (Request, []),
        "ringlm_connect": (ctypes.c_int, [ctypes.POINTER(Params), ctypes.POINTER(P)]),
        "ringlm_close": (None, [P]),
        "ringlm_last_error": (ctypes.c_char_p, []),
        "ringlm_submit": (ctypes.c_int, [P, ctypes.POINTER(Request), ctypes.POINTER(ctypes.c_uint32)]),
        "ringlm_cancel": (ctypes.c_int, [P, ctypes.c_uint32]),
        "ringlm_poll": (ctypes.c_int, [P, ctypes.POINTER(Event), ctypes.c_int]),
        "ringlm_wait": (ctypes.c_int, [P, ctypes.POINTER(Event), ctypes.c_int, ctypes.c_int]),
        "ringlm_wait_ex": (ctypes.c_int, [P, ctypes.POINTER(Event), ctypes.POINTER(Logprobs), ctypes.c_int,
                                          ctypes.c_int]),
        "ringlm_get_info": (ctypes.c_int, [P, ctypes.POINTER(Info)]),
        "ringlm_stats_json": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_size_t]),
        "ringlm_strerror": (ctypes.c_char_p, [ctypes.c_int]),
        "ringlm_tokenize": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint32),
                                           ctypes.c_int]),
        "ringlm_tokenize_ex": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_uint, ctypes.POINTER(ctypes.c_uint32),
                                              ctypes.c_int]),
        "ringlm_chat_format": (ctypes.c_int, [P, ctypes.POINTER(ChatMsg), ctypes.c_int, ctypes.c_char_p,
                                              ctypes.c_int]),
        "ringlm_textstream_init": (None, [ctypes.POINTER(TextStream), ctypes.c_uint32]),
        "ringlm_textstream_push": (ctypes.c_int, [P, ctypes.POINTER(TextStream), ctypes.c_uint32,
                                                  ctypes.c_char_p, ctypes.c_size_t]),
        "ringlm_textstream_flush": (ctypes.c_int, [ctypes.POINTER(TextStream), ctypes.c_char_p, ctypes.c_size_t]),
        "ringlm_constraint_create": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                                                    ctypes.POINTER(P)]),
        "ringlm_constraint_destroy": (None, [P]),
        "ringlm_tools_create": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(P)]),
        "ringlm_tools_prompt": (ctypes.c_char_p, [P]),
        "ringlm_tools_constraint": (P, [P]),
        "ringlm_tools_parse": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]),
        "ringlm_tools_destroy": (None, [P]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
