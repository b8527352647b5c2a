mod vec_progress_update;
