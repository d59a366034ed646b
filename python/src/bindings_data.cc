// tessera._tessera, the job's data and model as the C++ trainer sees them:
// its data sources (the Criteo reader and its preprocessing, the synthetic
// generator), how a step's examples are split among trainers, and the DLRM
// model's initial parameters. With them a PyTorch trainer reads the same
// examples and starts from the same weights as a C++ trainer of the job.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "python/src/bindings_common.h"
#include "common/param_file.h"
#include "trainer/batch.h"
#include "trainer/data_factory.h"
#include "trainer/data_split.h"
#include "kernels/blas_core.h"
#include "kernels/dense_ops.h"
#include "trainer/dlrm_model.h"

namespace py = pybind11;

namespace tessera {
namespace {

StatusOr<JobConfig> JobFromDict(const py::dict& job) {
  py::module_ json = py::module_::import("json");
  const std::string text = py::str(json.attr("dumps")(job));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument("the job is not JSON");
  return ParseJobConfigJson(j, "");
}

// A job's training or evaluation data, read by position.
class PyData {
 public:
  PyData(const py::dict& job, const std::string& split) {
    JobConfig config = Check(JobFromDict(job));
    if (split == "train") {
      source_ = Check(OpenTrainingData(config));
    } else if (split == "eval") {
      source_ = Check(OpenEvalData(config));
      if (!source_) throw py::value_error("the job has no evaluation data (data.eval_path)");
    } else {
      throw py::value_error("split must be 'train' or 'eval', not '" + split + "'");
    }
  }

  int64_t num_examples() const { return source_->num_examples(); }
  std::vector<std::string> features() const { return source_->feature_names(); }

  // {"dense" [n x d] float32, "labels" [n] float32, "keys", "lengths" int32,
  //  "values" int64, "weights" float32 or None}
  py::dict Read(int64_t begin, int64_t count) {
    if (begin < 0 || count < 0 || begin + count > source_->num_examples()) {
      throw py::value_error("examples [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                            ") are outside [0, " + std::to_string(source_->num_examples()) + ")");
    }
    Batch b;
    Status st;
    {
      py::gil_scoped_release nogil;
      st = source_->Read(begin, count, &b);
    }
    Check(st);
    py::dict out;
    out["dense"] = AdoptVector(std::move(b.dense), {b.size, static_cast<int64_t>(b.num_dense)});
    out["labels"] = AdoptVector(std::move(b.labels), {b.size});
    out["keys"] = b.sparse.keys;
    out["batch_size"] = b.sparse.batch_size;
    const int64_t n_lengths = static_cast<int64_t>(b.sparse.lengths.size());
    const int64_t n_values = static_cast<int64_t>(b.sparse.values.size());
    out["lengths"] = AdoptVector(std::move(b.sparse.lengths), {n_lengths});
    out["values"] = AdoptVector(std::move(b.sparse.values), {n_values});
    if (b.sparse.weighted()) {
      out["weights"] = AdoptVector(std::move(b.sparse.weights), {n_values});
    } else {
      out["weights"] = py::none();
    }
    return out;
  }

 private:
  std::unique_ptr<DataSource> source_;
};

}  // namespace

void BindData(py::module_& m) {
  py::class_<PyData>(m, "Data", "A job's training ('train') or evaluation ('eval') data, as its C++ trainers read it")
      .def(py::init<const py::dict&, const std::string&>(), py::arg("job"), py::arg("split") = "train")
      .def_property_readonly("num_examples", &PyData::num_examples)
      .def_property_readonly("features", &PyData::features)
      .def("read", &PyData::Read, py::arg("begin"), py::arg("count"),
           "Examples [begin, begin + count) of an epoch: a dict of numpy arrays (dense, labels, keys, lengths, "
           "values, weights)");

  m.def(
      "share_of_step",
      [](int64_t step, int rank, int world, int64_t batch, int64_t num_examples) {
        if (step < 0 || world < 1 || rank < 0 || rank >= world || batch < 1 || num_examples < 1) {
          throw py::value_error("share_of_step: needs step >= 0, 0 <= rank < world, batch >= 1, num_examples >= 1");
        }
        const StepShare s = ShareOfStep(step, rank, world, batch, num_examples);
        py::dict d;
        d["epoch"] = s.epoch;
        d["begin"] = s.begin;
        d["count"] = s.count;
        d["global_count"] = s.global_count;
        return d;
      },
      py::arg("step"), py::arg("rank"), py::arg("world"), py::arg("batch"), py::arg("num_examples"),
      "Trainer `rank`'s examples of global step `step` (trainer/data_split.h): epoch, begin, count, global_count");
  m.def(
      "steps_per_epoch",
      [](int world, int64_t batch, int64_t num_examples) {
        if (world < 1 || batch < 1 || num_examples < 1) throw py::value_error("steps_per_epoch: needs positive sizes");
        return StepsPerEpoch(world, batch, num_examples);
      },
      py::arg("world"), py::arg("batch"), py::arg("num_examples"));

  m.def(
      "write_params",
      [](const std::string& path, const py::dict& arrays) {
        std::vector<ParamArray> out;
        for (auto item : arrays) {
          const std::string name = py::str(item.first);
          auto a = ExpectArray<float>(item.second, "write_params: '" + name + "'");
          if (a.ndim() > 2) throw py::value_error("write_params: '" + name + "' has more than 2 dimensions");
          const int64_t rows = a.ndim() == 2 ? a.shape(0) : 1;
          const int64_t cols = a.ndim() == 2 ? a.shape(1) : a.size();
          out.push_back(ParamArray::Floats(name, rows, cols, std::vector<float>(a.data(), a.data() + a.size())));
        }
        Status st;
        {
          py::gil_scoped_release nogil;
          st = WriteParamFile(path, out);
        }
        Check(st);
      },
      py::arg("path"), py::arg("arrays"),
      "Writes {name: float32 array (1-D: one row)} as a Tessera parameter file (what dumps and checkpoints hold; "
      "tessera_compare_dumps reads it)");
  m.def(
      "set_blas_threads",
      [](int threads) {
        if (threads < 1) throw py::value_error("set_blas_threads: threads must be >= 1, not " + std::to_string(threads));
        kernels::SetBlasThreads(threads);
      },
      py::arg("threads"),
      "Threads of the OpenBLAS this process runs (the C++ trainer's --blas_threads; 1 there by default). Debian's "
      "torch calls the same OpenBLAS for its matrix products, where torch.set_num_threads does not reach the "
      "pthread build: without this, its worker threads spin in sched_yield on cores the other trainers need");
  m.def("blas_threads", &kernels::BlasThreads, "The threads OpenBLAS may use now (tessera.set_blas_threads)");
  m.def("blas_core", &kernels::BlasCoreName,
        "The kernels (core) this process's OpenBLAS runs, the one Debian's torch runs its matrix products on");
  m.def(
      "better_blas_core", &kernels::BetterBlasCoreHere,
      "Where OpenBLAS fell back to its generic kernels on a CPU it does not know: the core OPENBLAS_CORETYPE "
      "should name before Python starts (the C++ trainer sets it for itself); else \"\"");
  m.def(
      "dlrm_initial_params",
      [](const py::dict& job, const std::vector<int>& feature_dims) {
        JobConfig config = Check(JobFromDict(job));
        if (!config.has_model) throw py::value_error("the job has no model (no \"model\" in its config)");
        DlrmModel model(config.model, feature_dims, config.training.seed);
        std::vector<float> flat = Check(model.CopyParamsToHost());
        py::dict out;
        for (const DlrmModel::ParamInfo& info : model.ParamInfos()) {
          const float* p = flat.data() + info.offset;
          const bool bias = info.name.size() > 5 && info.name.compare(info.name.size() - 5, 5, ".bias") == 0;
          std::vector<int64_t> shape = bias ? std::vector<int64_t>{info.cols} : std::vector<int64_t>{info.rows, info.cols};
          out[py::str(info.name)] = AdoptVector(std::vector<float>(p, p + info.rows * info.cols), std::move(shape));
        }
        return out;
      },
      py::arg("job"), py::arg("feature_dims"),
      "The C++ trainer's DLRM parameters at the start of `job` (name -> array; weights [out x in] as torch's "
      "Linear), for a PyTorch model that starts where a C++ trainer does");
}

}  // namespace tessera
