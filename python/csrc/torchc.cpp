// gorun.torch's native fast path: dist.all_reduce of one small tensor
// from torch's C++ straight to libgorun.so's C ABI, with no Python frame
// in between.
//
// The Python process group (gorun/torch.py) stays the backend: it sets an
// AllReduce object of this module as its instance's `allreduce`, so that
// torch's Python (dist.all_reduce) and its C++ (DDP's reducer, through
// the ProcessGroup trampoline) both reach it. It takes an all-reduce of
// one dense, contiguous CPU tensor of a type gorun reduces as it lies,
// with a reduction gorun has:
//   - at most inline_bytes: run in the calling thread with the
//     interpreter's lock released; the Work is complete from the start,
//     or (failed) the Python package's failed Work;
//   - larger: started on gorun's goroutines (gorun_start_on, queue 1); a
//     C++ Work completes when it is done, woken in the thread that waits
//     for it or by this module's collecting thread (gorun_next_on), and
//     its wait() and future raise the Python package's typed errors
//     (PeerLost, Timeout, ...).
// Any other call goes to the Python method unchanged.
//
// Built against the PyTorch it runs with (python/csrc/build.py, by
// `make python`), for torch 1.13 and 2.x alike: it uses only c10d's Work,
// its option types and torch's pybind11 casters.

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>
#include <ATen/core/ivalue.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

namespace {

// libgorun.so's C ABI (capi/main.go), found by the Python package's
// ctypes handle and passed in by address (bind).
struct Lib {
  int (*run)(int64_t comm, int kind, int dtype, int redop, int root, void* send, int64_t nsend, void* recv,
             int64_t nrecv, int64_t timeout_ms, char* errbuf, int errlen) = nullptr;
  int64_t (*start_on)(int queue, int64_t comm, int kind, int dtype, int redop, int root, int tag, void* send,
                      int64_t nsend, void* recv, int64_t nrecv, int64_t* counts, int ncounts,
                      int64_t timeout_ms) = nullptr;
  int64_t (*next_on)(int queue, int64_t timeout_ms) = nullptr;
  int (*wait)(int64_t id, int64_t timeout_ms) = nullptr;
  int (*result)(int64_t id, char* errbuf, int errlen) = nullptr;
};
Lib lib;

// This module's queue of finished operations (gorun_next_on).
constexpr int kQueue = 1;
constexpr int kErrLen = 4096;

// The Python package's error of a result code (gorun._core.error); kept
// for the life of the process (never released, so that exit does not
// need the interpreter).
PyObject* error_of = nullptr;

// The result code of an operation its timeout ended (capi's codeTimeout),
// whose message begins as the Python package's Timeout's does.
constexpr int kTimeoutCode = 6;
constexpr const char* kTimeoutPrefix = "the operation's timeout ended it: ";

// A failed operation's outcome, thrown by a Work's wait() and stored in
// its future; Python sees it as the package's typed error (the translator
// in the module init), C++ (DDP) as a runtime_error with its message.
class Failure : public std::runtime_error {
 public:
  Failure(int code, const std::string& msg)
      : std::runtime_error(code == kTimeoutCode && msg.rfind(kTimeoutPrefix, 0) != 0 ? kTimeoutPrefix + msg : msg),
        code(code) {}
  int code;
};

// An error message as a Python str; bytes that are not UTF-8 (a message
// cut to fit the buffer) are replaced, as the Python package decodes.
py::object message(const char* s, size_t n) {
  PyObject* o = PyUnicode_DecodeUTF8(s, static_cast<Py_ssize_t>(n), "replace");
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(o);
}

// A Work whose operation ran in the calling thread and succeeded: complete
// from the start; its future is made only when torch asks for it.
class DoneWork : public c10d::Work {
 public:
  explicit DoneWork(std::vector<at::Tensor> result) : result_(std::move(result)) { finish(); }

  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds /*timeout*/) override { return true; }
  std::vector<at::Tensor> result() override { return result_; }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    std::lock_guard<std::mutex> g(fut_mu_);
    if (!fut_) {
      fut_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
      fut_->markCompleted(c10::IValue(result_));
    }
    return fut_;
  }

 private:
  std::vector<at::Tensor> result_;
  std::mutex fut_mu_;
  c10::intrusive_ptr<c10::ivalue::Future> fut_;
};

// A Work whose operation runs on gorun's goroutines. Its tensors stay
// referenced until it completes, so the memory gorun writes stays alive
// even if the caller drops the Work.
class PendingWork : public c10d::Work {
 public:
  explicit PendingWork(std::vector<at::Tensor> tensors) : tensors_(std::move(tensors)) {}

  void setId(int64_t id) { id_ = id; }

  bool isCompleted() override {
    std::lock_guard<std::mutex> g(mu_);
    return done_;
  }
  bool isSuccess() const override {
    std::lock_guard<std::mutex> g(mu_);
    return done_ && code_ == 0;
  }
  std::exception_ptr exception() const override {
    std::lock_guard<std::mutex> g(mu_);
    return done_ && code_ != 0 ? std::make_exception_ptr(Failure(code_, msg_)) : nullptr;
  }
  std::vector<at::Tensor> result() override {
    wait(std::chrono::milliseconds(0));
    return tensors_;
  }

  // Waits for the operation in this thread (the operation's own
  // timeout bounds it) and raises its error.
  bool wait(std::chrono::milliseconds /*timeout*/) override;

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    std::lock_guard<std::mutex> g(mu_);
    if (!fut_) {
      fut_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
      if (done_) settle();
    }
    return fut_;
  }

  // Records the outcome (once) and wakes the waiters; the future's
  // callbacks run here.
  void complete(int code, std::string msg) {
    c10::intrusive_ptr<c10::ivalue::Future> fut;
    {
      std::lock_guard<std::mutex> g(mu_);
      code_ = code;
      msg_ = std::move(msg);
      done_ = true;
      fut = fut_;
    }
    cv_.notify_all();
    if (fut) {
      if (code == 0) {
        fut->markCompleted(c10::IValue(tensors_));
      } else {
        fut->setError(std::make_exception_ptr(Failure(code, msg_)));
      }
    }
  }

 private:
  // Completes a future made after the outcome (mu_ held).
  void settle() {
    if (code_ == 0) {
      fut_->markCompleted(c10::IValue(tensors_));
    } else {
      fut_->setError(std::make_exception_ptr(Failure(code_, msg_)));
    }
  }

  std::vector<at::Tensor> tensors_;
  int64_t id_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  int code_ = 0;
  std::string msg_;
  c10::intrusive_ptr<c10::ivalue::Future> fut_;
};

// The operations this module started and not yet completed, by id, and
// the threads that complete them: one collects finished ids
// (gorun_next_on) and hands each to a completer, so that a future's
// callback that waits for another operation cannot keep that operation's
// completion from running (a second completer starts when none is free).
class Ops {
 public:
  // Starts an operation with start (which calls gorun_start_on) and
  // registers w under its id, both under the lock, so that the collecting
  // thread cannot see the id before w is there.
  template <typename Start>
  void add(const c10::intrusive_ptr<PendingWork>& w, Start start) {
    std::lock_guard<std::mutex> g(mu_);
    if (!collecting_) {
      collecting_ = true;
      std::thread([this] { collect(); }).detach();
    }
    const int64_t id = start();
    w->setId(id);
    pending_.emplace(id, w);
  }

  // Completes id's Work unless it was completed already: from the thread
  // that waited for it, or a completer.
  void finish(int64_t id) {
    c10::intrusive_ptr<PendingWork> w;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = pending_.find(id);
      if (it == pending_.end()) return;
      w = std::move(it->second);
      pending_.erase(it);
    }
    char err[kErrLen];
    const int code = lib.result(id, err, kErrLen);
    w->complete(code, code == 0 ? std::string() : std::string(err, strnlen(err, kErrLen)));
  }

 private:
  // Each id goes to a completer of its own: an idle one, reserved here
  // (so that two ids never wait for one completer), or a new one.
  void collect() {
    for (;;) {
      const int64_t id = lib.next_on(kQueue, 500);
      if (id <= 0) continue;
      std::unique_lock<std::mutex> g(qmu_);
      queue_.push_back(id);
      if (free_ == 0) {
        std::thread([this] { complete(); }).detach();
      } else {
        --free_;
      }
      g.unlock();
      qcv_.notify_one();
    }
  }

  void complete() {
    std::unique_lock<std::mutex> g(qmu_);
    for (;;) {
      qcv_.wait(g, [this] { return !queue_.empty(); });
      const int64_t id = queue_.front();
      queue_.pop_front();
      g.unlock();
      try {
        finish(id);
      } catch (...) {
        // A future's callback threw: torch reports what its own callbacks
        // throw through the future; nothing is left to do here, and the
        // completer must live on.
      }
      g.lock();
      ++free_;
    }
  }

  std::mutex mu_;
  std::unordered_map<int64_t, c10::intrusive_ptr<PendingWork>> pending_;
  bool collecting_ = false;
  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<int64_t> queue_;
  int free_ = 0;  // idle completers not yet reserved for an id
};
Ops* ops = new Ops;  // never destroyed: its threads outlive exit's destructors

bool PendingWork::wait(std::chrono::milliseconds) {
  bool done;
  {
    std::lock_guard<std::mutex> g(mu_);
    done = done_;
  }
  if (!done) {
    // gorun_wait parks in Go until the operation is done: 2 when it
    // finished while this thread waited (then it is this thread's to
    // complete), 1 when it had finished before (the collecting thread
    // has it, or this thread takes it first: finish runs once).
    int r;
    while ((r = lib.wait(id_, 1000)) == 0) {
    }
    ops->finish(id_);
  }
  std::unique_lock<std::mutex> g(mu_);
  cv_.wait(g, [this] { return done_; });
  if (code_ != 0) throw Failure(code_, msg_);
  return true;
}

// The group's lock: operations start in call order. Python takes it with
// `with`, waiting with the interpreter's lock released; the fast path
// takes it in C++.
class Lock {
 public:
  void acquire() {
    if (mu_.try_lock()) return;
    py::gil_scoped_release nogil;
    mu_.lock();
  }
  void release() { mu_.unlock(); }
  std::mutex& mu() { return mu_; }

 private:
  std::mutex mu_;
};

// The reduction codes of gorun's C ABI (python/gorun/_core.py).
struct Codes {
  int allreduce = 0;
  int dtype[static_cast<int>(c10::ScalarType::NumOptions)] = {};  // 0: not reduced as it lies
  int op[16] = {};                                                 // by RedOpType; 0: not gorun's
  int avg = 0;                                                     // the AVG code, floats only
};

class AllReduce {
 public:
  AllReduce(int64_t comm, int64_t inline_bytes, int64_t default_timeout_ms, std::shared_ptr<Lock> lock,
            py::object slow, py::object failed, py::dict codes)
      : comm_(comm),
        inline_bytes_(inline_bytes),
        default_timeout_ms_(default_timeout_ms),
        lock_(std::move(lock)),
        slow_(std::move(slow)),
        failed_(std::move(failed)) {
    if (lib.run == nullptr) throw std::logic_error("gorun: _torchc.bind was not called");
    codes_.allreduce = codes["ALLREDUCE"].cast<int>();
    codes_.avg = codes["AVG"].cast<int>();
    const std::pair<c10::ScalarType, const char*> types[] = {
        {c10::ScalarType::Float, "FLOAT32"}, {c10::ScalarType::Double, "FLOAT64"},
        {c10::ScalarType::Int, "INT32"},     {c10::ScalarType::Long, "INT64"},
        {c10::ScalarType::Char, "INT8"},     {c10::ScalarType::Byte, "UINT8"}};
    for (const auto& [st, name] : types) codes_.dtype[static_cast<int>(st)] = codes[name].cast<int>();
    const std::pair<c10d::ReduceOp::RedOpType, const char*> ops[] = {
        {c10d::ReduceOp::SUM, "SUM"}, {c10d::ReduceOp::AVG, "AVG"},        {c10d::ReduceOp::MIN, "MIN"},
        {c10d::ReduceOp::MAX, "MAX"}, {c10d::ReduceOp::PRODUCT, "PROD"}};
    for (const auto& [op, name] : ops) codes_.op[static_cast<int>(op)] = codes[name].cast<int>();
  }

  // Called as ProcessGroup.allreduce(tensors, opts) is.
  // How many operations ran here in the calling thread, and how many
  // started on gorun's goroutines (for tests).
  int64_t ran() const { return ran_.load(std::memory_order_relaxed); }
  int64_t started() const { return started_.load(std::memory_order_relaxed); }

  py::object call(py::object tensors, py::object opts) {
    const c10d::AllreduceOptions* o = nullptr;
    if (!opts.is_none() && py::isinstance<c10d::AllreduceOptions>(opts)) o = opts.cast<c10d::AllreduceOptions*>();
    if (o != nullptr && PyList_CheckExact(tensors.ptr()) && PyList_GET_SIZE(tensors.ptr()) == 1) {
      PyObject* item = PyList_GET_ITEM(tensors.ptr(), 0);
      if (THPVariable_Check(item)) {
        const at::Tensor t = THPVariable_Unpack(item);  // a reference of its own while the GIL is released
        int dtype = 0, op = 0;
        if (fast(t, *o, &dtype, &op)) {
          const int64_t timeout = o->timeout.count() > 0 ? o->timeout.count() : default_timeout_ms_;
          if (t.numel() * static_cast<int64_t>(t.element_size()) <= inline_bytes_) {
            return runInline(t, dtype, op, timeout);
          }
          return start(t, dtype, op, timeout);
        }
      }
    }
    return opts.is_none() ? slow_(tensors) : slow_(tensors, opts);
  }

 private:
  bool fast(const at::Tensor& t, const c10d::AllreduceOptions& o, int* dtype, int* op) const {
    if (!t.device().is_cpu() || t.layout() != c10::kStrided || !t.is_contiguous()) return false;
    const int st = static_cast<int>(t.scalar_type());
    if (st < 0 || st >= static_cast<int>(c10::ScalarType::NumOptions) || codes_.dtype[st] == 0) return false;
    const int rop = static_cast<int>(o.reduceOp.op_);
    if (rop < 0 || rop >= 16 || codes_.op[rop] == 0) return false;
    if (codes_.op[rop] == codes_.avg && !t.is_floating_point()) return false;
    *dtype = codes_.dtype[st];
    *op = codes_.op[rop];
    return true;
  }

  py::object runInline(const at::Tensor& t, int dtype, int op, int64_t timeout) {
    const int64_t n = t.numel();
    void* p = n > 0 ? t.data_ptr() : nullptr;
    char err[kErrLen];
    int code;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> g(lock_->mu());
      code = lib.run(comm_, codes_.allreduce, dtype, op, 0, p, n, nullptr, 0, timeout, err, kErrLen);
    }
    ran_.fetch_add(1, std::memory_order_relaxed);
    if (code != 0) return failed_(code, message(err, strnlen(err, kErrLen)));
    return py::cast(c10::intrusive_ptr<c10d::Work>(c10::make_intrusive<DoneWork>(std::vector<at::Tensor>{t})));
  }

  py::object start(const at::Tensor& t, int dtype, int op, int64_t timeout) {
    const int64_t n = t.numel();
    void* p = n > 0 ? t.data_ptr() : nullptr;
    auto w = c10::make_intrusive<PendingWork>(std::vector<at::Tensor>{t});
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> g(lock_->mu());
      ops->add(w, [&] {
        const int64_t id = lib.start_on(kQueue, comm_, codes_.allreduce, dtype, op, 0, 0, p, n, nullptr, 0, nullptr, 0,
                                        timeout);
        if (id <= 0) throw std::logic_error("gorun: libgorun.so has no queue for the native fast path");
        return id;
      });
    }
    started_.fetch_add(1, std::memory_order_relaxed);
    return py::cast(c10::intrusive_ptr<c10d::Work>(w));
  }

  int64_t comm_;
  int64_t inline_bytes_;
  int64_t default_timeout_ms_;
  std::shared_ptr<Lock> lock_;
  py::object slow_;
  py::object failed_;
  Codes codes_;
  std::atomic<int64_t> ran_{0};
  std::atomic<int64_t> started_{0};
};

// Takes libgorun.so's functions by address (name -> address) and the
// Python package's error factory.
void bind(py::dict fns, py::object error) {
  lib.run = reinterpret_cast<decltype(lib.run)>(fns["gorun_run"].cast<uintptr_t>());
  lib.start_on = reinterpret_cast<decltype(lib.start_on)>(fns["gorun_start_on"].cast<uintptr_t>());
  lib.next_on = reinterpret_cast<decltype(lib.next_on)>(fns["gorun_next_on"].cast<uintptr_t>());
  lib.wait = reinterpret_cast<decltype(lib.wait)>(fns["gorun_wait"].cast<uintptr_t>());
  lib.result = reinterpret_cast<decltype(lib.result)>(fns["gorun_result"].cast<uintptr_t>());
  if (!lib.run || !lib.start_on || !lib.next_on || !lib.wait || !lib.result) {
    throw std::invalid_argument("gorun: a libgorun.so function is missing");
  }
  Py_XDECREF(error_of);
  error_of = error.release().ptr();
}

}  // namespace

PYBIND11_MODULE(_torchc, m) {
  m.doc() = "gorun.torch's native fast path (python/csrc/torchc.cpp)";
  m.attr("TORCH_VERSION") = GORUN_TORCH_VERSION;  // the torch it was built against (build.py)
  m.def("bind", &bind, py::arg("functions"), py::arg("error"));
  // A Failure reaches Python as the package's typed error (pybind11's
  // translators are shared with torch's bindings, so this holds for
  // Work.wait and Future.wait too).
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Failure& e) {
      if (error_of == nullptr) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
        return;
      }
      const char* what = e.what();
      PyObject* msg = PyUnicode_DecodeUTF8(what, static_cast<Py_ssize_t>(strlen(what)), "replace");
      if (msg == nullptr) return;  // the decoder's error stands
      PyObject* exc = PyObject_CallFunction(error_of, "iO", e.code, msg);
      Py_DECREF(msg);
      if (exc == nullptr) return;  // the call's own error stands
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc)), exc);
      Py_DECREF(exc);
    }
  });
  py::class_<Lock, std::shared_ptr<Lock>>(m, "Lock")
      .def(py::init<>())
      .def("acquire", &Lock::acquire)
      .def("release", &Lock::release)
      .def("__enter__", [](Lock& l) { l.acquire(); })
      .def("__exit__", [](Lock& l, py::args) { l.release(); });
  py::class_<AllReduce>(m, "AllReduce")
      .def(py::init<int64_t, int64_t, int64_t, std::shared_ptr<Lock>, py::object, py::object, py::dict>(),
           py::arg("comm"), py::arg("inline_bytes"), py::arg("default_timeout_ms"), py::arg("lock"), py::arg("slow"),
           py::arg("failed"), py::arg("codes"))
      .def("__call__", &AllReduce::call, py::arg("tensors"), py::arg("opts") = py::none())
      .def_property_readonly("ran", &AllReduce::ran)
      .def_property_readonly("started", &AllReduce::started);
}
