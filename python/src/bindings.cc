// tessera._tessera: the Python face of TrainerSession. Arrays cross as numpy
// arrays: lookups' outputs are handed over without a copy (each array owns
// the vector the client filled); ids, lengths and gradients are read from
// the caller's arrays (copied once into the request, as the C++ trainer's
// batches are). Every blocking call releases the GIL, so a process may run
// several sessions (one per thread) and Python threads go on meanwhile.
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <glog/logging.h>
#include <nlohmann/json.hpp>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "python/src/bindings_common.h"
#include "python/src/trainer_session.h"

namespace py = pybind11;

namespace tessera {
namespace {

// ExpectArray's, and 1-D.
template <typename T>
py::array_t<T, py::array::c_style | py::array::forcecast> Expect1d(const py::handle& obj, const std::string& what) {
  auto arr = ExpectArray<T>(obj, what);
  if (arr.ndim() != 1) {
    throw py::value_error(what + ": expected a 1-D array, got " + std::to_string(arr.ndim()) + " dimensions");
  }
  return arr;
}

KeyedJaggedTensor MakeKjt(const std::vector<std::string>& keys, int64_t batch_size, const py::handle& lengths,
                          const py::handle& values, const py::handle& weights) {
  KeyedJaggedTensor kjt;
  kjt.keys = keys;
  kjt.batch_size = batch_size;
  auto l = Expect1d<int32_t>(lengths, "lengths");
  auto v = Expect1d<int64_t>(values, "values");
  kjt.lengths.assign(l.data(), l.data() + l.size());
  kjt.values.assign(v.data(), v.data() + v.size());
  if (!weights.is_none()) {
    auto w = Expect1d<float>(weights, "weights");
    kjt.weights.assign(w.data(), w.data() + w.size());
  }
  if (batch_size < 0) throw py::value_error("batch_size must be >= 0");
  Check(kjt.Validate());
  return kjt;
}

class PySession {
 public:
  PySession(const std::string& master, int rank, int world, const std::string& keys, bool insecure,
            int64_t register_timeout_ms, py::object save_state, int metrics_port, const std::string& metrics_address,
            const std::string& host) {
    TrainerSessionOptions o;
    o.master = master;
    o.rank = rank;
    o.world = world;
    o.keys_dir = keys;
    o.insecure = insecure;
    o.register_timeout_ms = register_timeout_ms;
    o.metrics_port = metrics_port;
    o.metrics_address = metrics_address;
    o.host = host;
    if (!save_state.is_none()) {
      save_state_ = std::make_shared<py::object>(std::move(save_state));
      std::weak_ptr<py::object> hook = save_state_;
      o.save_state = [hook]() -> StatusOr<std::string> {
        py::gil_scoped_acquire gil;
        auto fn = hook.lock();
        if (!fn) return Status::FailedPrecondition("the session is closed");
        try {
          py::object bytes = (*fn)();
          return std::string(py::bytes(bytes));
        } catch (const py::error_already_set& e) {
          return Status::Internal(std::string("save_state raised: ") + e.what());
        }
      };
    }
    StatusOr<std::unique_ptr<TrainerSession>> opened = Status::Internal("not opened");
    {
      py::gil_scoped_release nogil;
      opened = TrainerSession::Open(o);
    }
    session_ = Check(std::move(opened));
  }

  ~PySession() {
    // Joins the heartbeat and may wait on the master: not under the GIL.
    py::gil_scoped_release nogil;
    session_.reset();
  }

  py::dict Job() const {
    py::module_ json = py::module_::import("json");
    return json.attr("loads")(session_->job().ToJson().dump());
  }

  py::list Lookup(const std::vector<std::string>& keys, int64_t batch_size, const py::handle& lengths,
                  const py::handle& values, const py::handle& weights, bool inference) {
    KeyedJaggedTensor kjt = MakeKjt(keys, batch_size, lengths, values, weights);
    FeatureOutputs out;
    Status st;
    {
      py::gil_scoped_release nogil;
      st = session_->Lookup(kjt, inference, &out);
    }
    Check(st);
    py::list result;
    for (size_t f = 0; f < out.size(); ++f) {
      const int64_t cols = session_->dims()[f];
      const int64_t rows = static_cast<int64_t>(out[f].size()) / cols;
      result.append(AdoptVector(std::move(out[f]), {rows, cols}));
    }
    return result;
  }

  void Prefetch(const std::vector<std::string>& keys, int64_t batch_size, const py::handle& lengths,
                const py::handle& values, const py::handle& weights) {
    KeyedJaggedTensor kjt = MakeKjt(keys, batch_size, lengths, values, weights);
    Status st;
    {
      py::gil_scoped_release nogil;
      st = session_->Prefetch(kjt);
    }
    Check(st);
  }

  // The gradients are read where they are (float32, C order: torch's own
  // memory, through numpy), held alive here while the GIL is released.
  void Push(const py::list& grads) {
    std::vector<py::array_t<float, py::array::c_style | py::array::forcecast>> arrays;
    FeatureGrads g;
    arrays.reserve(grads.size());
    for (size_t f = 0; f < grads.size(); ++f) {
      arrays.push_back(ExpectArray<float>(grads[f], "gradient " + std::to_string(f)));
      g.emplace_back(arrays.back().data(), static_cast<size_t>(arrays.back().size()));
    }
    Status st;
    {
      py::gil_scoped_release nogil;
      st = session_->Push(g);
    }
    Check(st);
  }

  // In place: the array must be the caller's own memory (torch's, through
  // numpy), so no cast or copy may stand in for it.
  void AllReduceSum(const py::handle& obj, const py::object& ticket) {
    if (!py::isinstance<py::array>(obj)) {
      throw py::type_error("allreduce_sum: expected a numpy array, got " + std::string(py::str(obj.get_type())));
    }
    auto arr = py::reinterpret_borrow<py::array>(obj);
    if (!arr.dtype().is(py::dtype::of<float>())) {
      throw py::type_error("allreduce_sum: expected dtype float32, got " + std::string(py::str(arr.dtype())));
    }
    if (!(arr.flags() & py::array::c_style) || !arr.writeable()) {
      throw py::value_error("allreduce_sum: the array must be C-contiguous and writable (it is summed in place)");
    }
    std::span<float> data(static_cast<float*>(arr.mutable_data()), static_cast<size_t>(arr.size()));
    const int64_t t = ticket.is_none() ? session_->TakeSumTicket() : ticket.cast<int64_t>();
    Status st;
    {
      py::gil_scoped_release nogil;
      st = session_->AllReduceSum(data, t);
    }
    Check(st);
  }

  void Finish(const std::string& error, const py::object& eval) {
    nlohmann::json e;
    if (!eval.is_none()) {
      const std::string text = py::str(py::module_::import("json").attr("dumps")(eval));
      e = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (e.is_discarded() || !e.is_object()) throw py::value_error("eval must be a dict of JSON values");
    }
    Status st;
    {
      py::gil_scoped_release nogil;
      st = session_->Finish(error, e);
    }
    Check(st);
  }

  // None when the job does not roll back; else where it went back to.
  py::object FollowRollback() {
    bool followed = false;
    Status st;
    {
      py::gil_scoped_release nogil;
      st = session_->FollowRollback(&followed);
    }
    Check(st);
    if (!followed) return py::none();
    py::dict d;
    d["step"] = session_->step();
    d["state"] = py::bytes(session_->start_state());
    d["generation"] = session_->generation();
    return d;
  }

  // The master's rendezvous store, for the program's own process group
  // (tessera.torch.Store).
  void StoreSet(const std::string& key, const py::bytes& value) {
    std::string v = value;
    Status st;
    {
      py::gil_scoped_release nogil;
      st = session_->StoreSet(key, std::move(v));
    }
    Check(st);
  }

  py::bytes StoreGet(const std::string& key, double timeout_s) {
    if (!(timeout_s >= 0)) throw py::value_error("timeout_s must be >= 0");
    std::string value;
    Status st;
    {
      py::gil_scoped_release nogil;
      auto v = session_->StoreGet(key, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
      st = v.status();
      if (v.ok()) value = std::move(*v);
    }
    Check(st);
    return py::bytes(value);
  }

  int64_t StoreAdd(const std::string& key, int64_t delta) {
    int64_t count = 0;
    Status st;
    {
      py::gil_scoped_release nogil;
      auto v = session_->StoreAdd(key, delta);
      st = v.status();
      if (v.ok()) count = *v;
    }
    Check(st);
    return count;
  }

  TrainerSession& session() { return *session_; }

 private:
  std::shared_ptr<py::object> save_state_;
  std::unique_ptr<TrainerSession> session_;
};

}  // namespace
}  // namespace tessera

PYBIND11_MODULE(_tessera, m) {
  using tessera::PySession;
  m.doc() = "Tessera's trainer client: joins a job and looks embeddings up on its parameter servers";
  static bool logging = false;
  if (!logging) {
    // A library in someone's process: its log goes to stderr, warnings and
    // up, not into files under /tmp (GLOG_minloglevel=0 and GLOG_log_dir
    // say otherwise).
    if (getenv("GLOG_log_dir") == nullptr) FLAGS_logtostderr = true;
    if (getenv("GLOG_minloglevel") == nullptr) FLAGS_minloglevel = google::GLOG_WARNING;
    google::InitGoogleLogging("tessera-python");
    logging = true;
  }
  tessera::g_tessera_error = py::exception<std::runtime_error>(m, "TesseraError", PyExc_RuntimeError).inc_ref().ptr();
  tessera::BindData(m);
  // pybind11 sets up its numpy API (an import of numpy's core) in a
  // function-local static on first use, holding a C++ guard while it waits
  // for the GIL: two threads' first calls at once (two sessions, one per
  // thread) could deadlock, one holding the guard, the other the GIL. Set
  // it up now, while the import holds the GIL alone.
  (void)py::dtype::of<float>();

  py::class_<PySession>(m, "Session")
      .def(py::init<const std::string&, int, int, const std::string&, bool, int64_t, py::object, int,
                    const std::string&, const std::string&>(),
           py::arg("master"), py::arg("rank"), py::arg("world"), py::arg("keys") = "", py::arg("insecure") = false,
           py::arg("register_timeout_ms") = 120000, py::arg("save_state") = py::none(), py::arg("metrics_port") = -1,
           py::arg("metrics_address") = "127.0.0.1", py::arg("host") = "",
           "Registers with the master as trainer `rank` of `world` and waits for the job to start; serves "
           "Prometheus metrics on metrics_port first when it is >= 0 (0: any free port).")
      .def_property_readonly("features", [](PySession& s) { return s.session().features(); })
      .def_property_readonly("dims", [](PySession& s) { return s.session().dims(); })
      .def_property_readonly("pooled", [](PySession& s) { return s.session().pooled(); })
      .def_property_readonly("step", [](PySession& s) { return s.session().step(); })
      .def_property_readonly("start_step", [](PySession& s) { return s.session().start_step(); })
      .def_property_readonly("generation", [](PySession& s) { return s.session().generation(); })
      .def_property_readonly(
          "boundary_requested", [](PySession& s) { return s.session().boundary_requested(); },
          "Whether the master asked for a step boundary (a checkpoint on demand, a change of the servers), "
          "at which the next training lookup stops")
      .def_property_readonly("start_state", [](PySession& s) { return py::bytes(s.session().start_state()); })
      .def_property_readonly("job", &PySession::Job)
      .def_property_readonly("rank", [](PySession& s) { return s.session().rank(); })
      .def_property_readonly("prefetched", [](PySession& s) { return s.session().prefetched(); })
      .def_property_readonly("world", [](PySession& s) { return s.session().world(); })
      .def(
          "stop_at_next_step", [](PySession& s) { s.session().StopAtNextStep(); },
          "The trainers agreed (through their collective) to stop for the boundary asked for: the next training "
          "lookup waits at the master's barrier (tessera.torch calls this)")
      .def_property_readonly(
          "dump_dir", [](PySession& s) { return s.session().dump_dir(); },
          "Where trainer 0 writes its dense model at the end (tessera.write_params), when the master was started "
          "with --dump_dir; else ''")
      .def("lookup", &PySession::Lookup, py::arg("keys"), py::arg("batch_size"), py::arg("lengths"),
           py::arg("values"), py::arg("weights") = py::none(), py::arg("inference") = false,
           "Looks every feature up: a list, per feature in model order, of float32 arrays [rows x dim].")
      .def("prefetch", &PySession::Prefetch, py::arg("keys"), py::arg("batch_size"), py::arg("lengths"),
           py::arg("values"), py::arg("weights") = py::none(),
           "Sends the next step's lookup now (async jobs); the next training lookup must be of this batch.")
      .def("store_set", &PySession::StoreSet, py::arg("key"), py::arg("value"),
           "Sets `key` in the master's rendezvous store (the job's trainers' alone, over its keys)")
      .def("store_get", &PySession::StoreGet, py::arg("key"), py::arg("timeout_s"),
           "The value of `key` in the master's rendezvous store, waiting up to timeout_s for some trainer to set it")
      .def("store_add", &PySession::StoreAdd, py::arg("key"), py::arg("delta"),
           "Adds delta to the counter at `key` in the master's rendezvous store (0 when unset); the new count")
      .def("push", &PySession::Push, py::arg("grads"),
           "Sends the output gradients of the last training lookup (float32, the lookup's shapes).")
      .def("allreduce_sum", &PySession::AllReduceSum, py::arg("array"), py::arg("ticket") = py::none(),
           "Sums a float32 array (C-contiguous, writable) over the job's trainers, in place, through the session's "
           "own collective: sealed in a job with keys. Every trainer sums the same sizes in the same order: sums "
           "run in the order of their tickets (take_sum_ticket; without one, a ticket taken now), from any thread "
           "(tessera.torch.sealed_allreduce_hook sums DDP's buckets so, on a thread of its own).")
      .def(
          "take_sum_ticket", [](PySession& s) { return s.session().TakeSumTicket(); },
          "A place in the order of the session's sums, for an allreduce_sum run later, perhaps on another thread; "
          "every ticket taken must be used, or later sums wait for it forever")
      .def(
          "record_loss",
          [](PySession& s, double loss_sum, int64_t examples) { s.session().RecordLoss(loss_sum, examples); },
          py::arg("loss_sum"), py::arg("examples"),
          "Adds the step's loss, summed over its `examples`, to the master's progress and the metrics' "
          "tessera_trainer_loss (their mean)")
      .def_property_readonly(
          "metrics_url",
          [](PySession& s) -> py::object {
            const std::string url = s.session().metrics_url();
            return url.empty() ? py::object(py::none()) : py::object(py::str(url));
          },
          "http://ADDRESS:PORT/metrics, served until the session is deleted; None when metrics_port was None")
      .def("follow_rollback", &PySession::FollowRollback,
           "After an error (from this session, or the trainers' own collective): if the job rolls back (a lost "
           "server or trainer), waits for its new generation and joins it, returning {'step', 'state', "
           "'generation'}: train again from 'step' after restoring the model from 'state' (what save_state gave at "
           "that checkpoint; b'' before the first one: the model's initial values). None when the job does not "
           "roll back and nothing broke the session (the error was the caller's own); raises the session's error "
           "when something did")
      .def("finish", &PySession::Finish, py::arg("error") = "", py::arg("eval") = py::none(),
           "Waits for the last push and reports this trainer done to the master (with the evaluation's figures, "
           "e.g. {'auc': ..., 'log_loss': ...}, for its summary).")
      .def_property_readonly("finished", [](PySession& s) { return s.session().finished(); })
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PySession& s, py::object type, py::object value, py::object) {
        if (s.session().finished()) return false;
        // Never "": an exception with no message still fails the trainer.
        s.Finish(type.is_none() ? "" : "the Python trainer raised " + std::string(py::str(type.attr("__name__"))) +
                                          ": " + std::string(py::str(value)),
                 py::none());
        return false;
      });
}
