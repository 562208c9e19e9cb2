/*
 * SPDX-FileCopyrightText: Copyright (c) 2024-2026 NVIDIA CORPORATION & AFFILIATES. All rights reserved.
 * SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
 */

/* for exposition only */
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUstream_st *cudaStream_t;
