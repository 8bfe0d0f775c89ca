#include "meshstore/tensor.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

TEST(DType, SizesMatchTheirElementTypes) {
  EXPECT_EQ(dtype_size(DType::boolean), 1u);
  EXPECT_EQ(dtype_size(DType::uint8), 1u);
  EXPECT_EQ(dtype_size(DType::int16), 2u);
  EXPECT_EQ(dtype_size(DType::uint16), 2u);
  EXPECT_EQ(dtype_size(DType::float16), 2u);
  EXPECT_EQ(dtype_size(DType::bfloat16), 2u);
  EXPECT_EQ(dtype_size(DType::int32), 4u);
  EXPECT_EQ(dtype_size(DType::float32), 4u);
  EXPECT_EQ(dtype_size(DType::int64), 8u);
  EXPECT_EQ(dtype_size(DType::uint64), 8u);
  EXPECT_EQ(dtype_size(DType::float64), 8u);
  EXPECT_EQ(dtype_size(DType::float8_e4m3fn), 1u);
  EXPECT_EQ(dtype_size(DType::float8_e5m2), 1u);
}

TEST(DType, SafetensorsNamesFollowTheFormat) {
  EXPECT_EQ(dtype_safetensors_name(DType::boolean), "BOOL");
  EXPECT_EQ(dtype_safetensors_name(DType::uint8), "U8");
  EXPECT_EQ(dtype_safetensors_name(DType::int8), "I8");
  EXPECT_EQ(dtype_safetensors_name(DType::uint16), "U16");
  EXPECT_EQ(dtype_safetensors_name(DType::int64), "I64");
  EXPECT_EQ(dtype_safetensors_name(DType::float16), "F16");
  EXPECT_EQ(dtype_safetensors_name(DType::bfloat16), "BF16");
  EXPECT_EQ(dtype_safetensors_name(DType::float32), "F32");
  EXPECT_EQ(dtype_safetensors_name(DType::float64), "F64");
  EXPECT_EQ(dtype_safetensors_name(DType::float8_e4m3fn), "F8_E4M3");
  EXPECT_EQ(dtype_safetensors_name(DType::float8_e5m2), "F8_E5M2");
}

TEST(DType, EveryNameParsesBackToItsDType) {
  ASSERT_EQ(all_dtypes().size(), 15u);
  for (DType d : all_dtypes()) {
    EXPECT_EQ(*parse_dtype(dtype_name(d)), d) << dtype_name(d);
    EXPECT_EQ(*parse_dtype(dtype_safetensors_name(d)), d) << dtype_safetensors_name(d);
  }
}

TEST(DType, UnknownNameIsAClearError) {
  EXPECT_ERROR(parse_dtype("float17"), Errc::invalid_argument, "float17");
  EXPECT_FALSE(is_valid_dtype(15));
  EXPECT_TRUE(is_valid_dtype(14));
}

}  // namespace
}  // namespace meshstore
